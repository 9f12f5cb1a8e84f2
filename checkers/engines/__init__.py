"""The engines that run the kernel (checkers/kernel/): Spark's, on any master
(`spark.run`), and the in-process one, with no JVM (`local.run`). Both run
the same two stages on shards of the history's rows and return the shards'
partial results, which `checkers.kernel.stages.merge` makes one."""
