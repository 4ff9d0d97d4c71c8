// glibc's allocator controls (malloc_trim), which Swift's Glibc module does not include.
// Part of libc: nothing to link.
#ifndef THUMBD_MALLOC_SHIM_H
#define THUMBD_MALLOC_SHIM_H

#include <malloc.h>

#endif
