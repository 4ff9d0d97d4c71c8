// glibc's allocator controls (malloc_trim, mallopt), which Swift's Glibc module does not include.
// Part of libc: nothing to link.
#ifndef THUMBD_MALLOC_SHIM_H
#define THUMBD_MALLOC_SHIM_H

#include <malloc.h>
#include <stddef.h>

// Whether glibc serves this block from a mapping of its own (unmapped again by free) rather
// than from an arena: the IS_MMAPPED bit of the chunk's size word, which glibc's
// malloc_usable_size reads too.
static inline int thumbd_malloc_is_mapped(const void *block) {
    return (((const size_t *)block)[-1] & 2) != 0;
}

#endif
