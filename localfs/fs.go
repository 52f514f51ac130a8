package localfs

import "github.com/amiss-ci/amiss/localfs/vfs"

// FS is the file system the FileLedger uses; see package vfs.
type FS = vfs.FS

// File is an open file; see package vfs.
type File = vfs.File

// OSFS is the real file system.
type OSFS = vfs.OSFS
