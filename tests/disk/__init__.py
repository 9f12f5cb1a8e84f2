"""Disk faults: the faultfs, its control, the disk nemesis, runs that use them."""
