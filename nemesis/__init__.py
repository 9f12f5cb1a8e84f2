"""The nemesis: faults injected on a cluster from a seeded schedule, each
verified and recorded in the history, and healed at the end.

fault.py (what a fault record holds), targets.py (whom faults hit), one file
per family (partition.py, process.py, disk.py, power.py), registry.py (every
fault, one line each), schedule.py (the seeded plan), injector.py (the
thread that follows the plan and heals).
"""
