"""A tiny read-only FUSE filesystem with one file, mounted by tests on a node
to prove that `harness clean` unmounts what runs left behind.

Usage: python fuse_hello.py MOUNTPOINT   (stays in the foreground)
"""

import errno
import stat
import sys
import time

import mfusepy as fuse

CONTENT = b"hello from a harness test mount\n"


class Hello(fuse.Operations):
    def getattr(self, path, fh=None):
        now = time.time()
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2, "st_mtime": now, "st_ctime": now, "st_atime": now}
        if path == "/hello":
            return {"st_mode": stat.S_IFREG | 0o444, "st_nlink": 1, "st_size": len(CONTENT),
                    "st_mtime": now, "st_ctime": now, "st_atime": now}
        raise fuse.FuseOSError(errno.ENOENT)

    def readdir(self, path, fh):
        return [".", "..", "hello"]

    def read(self, path, size, offset, fh):
        return CONTENT[offset:offset + size]


if __name__ == "__main__":
    fuse.FUSE(Hello(), sys.argv[1], foreground=True, nothreads=True)
