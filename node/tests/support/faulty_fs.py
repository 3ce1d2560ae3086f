#!/usr/bin/python3
"""A pass-through FUSE file system whose fsync fails on command.

    faulty_fs.py BACKING MOUNTPOINT CONTROL

serves the files of BACKING at MOUNTPOINT. While the file CONTROL exists,
every fsync and fdatasync of a file answers EIO and syncs nothing, as a disk that
lost a write does; reads and writes go on. `node/tests/disk_faults.rs`
runs a member on it to show that a failed fsync stops the member. Runs in
the foreground until unmounted (fusermount -u); errors of the backing
file system pass through as their errno.
"""

import errno
import os
import sys

import fuse

fuse.fuse_python_api = (0, 2)


def serve(backing, mountpoint, control):
    def real(path):
        return os.path.join(backing, path.lstrip("/"))

    class File:
        def __init__(self, path, flags, *mode):
            self.fd = os.open(real(path), flags, *mode)

        def read(self, length, offset):
            return os.pread(self.fd, length, offset)

        def write(self, data, offset):
            return os.pwrite(self.fd, data, offset)

        def fgetattr(self):
            return os.fstat(self.fd)

        def ftruncate(self, length):
            os.ftruncate(self.fd, length)

        def flush(self):
            os.close(os.dup(self.fd))

        def fsync(self, data_only):
            if os.path.exists(control):
                return -errno.EIO
            if data_only:
                os.fdatasync(self.fd)
            else:
                os.fsync(self.fd)
            return 0

        def release(self, flags):
            os.close(self.fd)

    # No fsyncdir: python-fuse 1.0.5 crashes (SIGSEGV) calling one, so the
    # kernel answers directory fsyncs itself, with success.
    class FaultyFs(fuse.Fuse):
        def readdir(self, path, offset):
            for name in [".", ".."] + os.listdir(real(path)):
                yield fuse.Direntry(name)

        def getattr(self, path):
            return os.lstat(real(path))

        def readlink(self, path):
            return os.readlink(real(path))

        def mkdir(self, path, mode):
            os.mkdir(real(path), mode)

        def rmdir(self, path):
            os.rmdir(real(path))

        def unlink(self, path):
            os.unlink(real(path))

        def rename(self, old, new):
            os.rename(real(old), real(new))

        def link(self, target, name):
            os.link(real(target), real(name))

        def symlink(self, target, name):
            os.symlink(target, real(name))

        def chmod(self, path, mode):
            os.chmod(real(path), mode)

        def chown(self, path, user, group):
            os.chown(real(path), user, group)

        def truncate(self, path, length):
            os.truncate(real(path), length)

        def utimens(self, path, accessed, modified):
            os.utime(real(path), ns=(accessed.tv_sec * 10**9 + accessed.tv_nsec,
                                     modified.tv_sec * 10**9 + modified.tv_nsec))

        def access(self, path, mode):
            if not os.access(real(path), mode):
                return -errno.EACCES
            return 0

        def statfs(self):
            return os.statvfs(backing)

    server = FaultyFs(version="faulty_fs", dash_s_do="setsingle")
    server.file_class = File
    server.multithreaded = False
    server.fuse_args.mountpoint = mountpoint
    server.fuse_args.setmod("foreground")
    server.fuse_args.add("default_permissions")
    server.main()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: faulty_fs.py BACKING MOUNTPOINT CONTROL")
    serve(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3]))
