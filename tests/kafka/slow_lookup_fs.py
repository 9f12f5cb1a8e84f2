"""A FUSE filesystem in which every name takes SECONDS to look up and does
not exist. Put first in a daemon's PATH, it holds the daemon's launch (env
searching PATH for setsid) in the window between its fork and the exec that
tags it, for as long as a test needs, on a real node and without a tracer.

Usage: python slow_lookup_fs.py MOUNTPOINT SECONDS   (stays in the foreground)
"""

import errno
import stat
import sys
import time

import mfusepy as fuse


class SlowLookups(fuse.Operations):
    def __init__(self, seconds: float):
        self.seconds = seconds

    def getattr(self, path, fh=None):
        if path == "/":
            now = time.time()
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2, "st_mtime": now, "st_ctime": now,
                    "st_atime": now}
        time.sleep(self.seconds)
        raise fuse.FuseOSError(errno.ENOENT)

    def readdir(self, path, fh):
        return [".", ".."]


if __name__ == "__main__":
    fuse.FUSE(SlowLookups(float(sys.argv[2])), sys.argv[1], foreground=True, nothreads=True)
