/*
 * dvar/dvar.h - the whole public API of libdvar.
 *
 * Conventions, the same in every header:
 *
 * Status and errors. A function that can fail returns an int, DVAR_OK (0) or
 * a negative dvar_code; test that status. dvar_error_last() then says why:
 * it describes the most recent failure on the calling thread and is not
 * cleared by successful calls (dvar_error_clear empties it).
 *
 * Options. Every options or spec struct has `unsigned int version` as its
 * first field. Initialize one with its positional macro
 * (`dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;`) or its function
 * (`dvar_write_options_init(&o, DVAR_WRITE_OPTIONS_VERSION)`), then set the
 * fields you need; fields left zero take their documented defaults. A
 * function taking options accepts any version from 1 to the library's, so a
 * program built against an older header keeps working when a struct grows;
 * anything else is DVAR_EINVAL. A NULL options pointer means the defaults.
 * The macros leave the trailing fields to zero-initialization, which GCC's
 * and Clang's -Wmissing-field-initializers (part of -Wextra) reports; the
 * _init functions avoid it.
 *
 * Ownership. Objects come from dvar_x_open / dvar_x_create and go back with
 * dvar_x_free (NULL is a no-op). Memory the library hands out to the caller
 * (a blob, a string) is released with dvar_free, never free(). A struct the
 * library fills with memory of its own is emptied with its _clear function.
 * Strings and arrays a function returns through const pointers are
 * borrowed: they live as long as the object they come from. Arguments are
 * borrowed for the call unless a function says it copies them.
 *
 * Lengths. Byte lengths of memory the caller passes or receives and lengths
 * of arrays in memory are size_t; sizes of data as a shape or a file
 * describes it (element and byte counts of a tensor, file sizes, offsets)
 * are uint64_t.
 *
 * Names. Public symbols start with dvar_ (DVAR_ for macros and enum
 * values), then the object or module, then the verb: dvar_reader_open,
 * dvar_reader_read, dvar_writer_commit, dvar_manager_save; the type is
 * dvar_<object> (dvar_reader, dvar_manager). Only what include/dvar/
 * declares is exported; the library's private names follow the same
 * pattern in headers beside their code, and a double underscore
 * (dvar_crc32c__table) marks a hook that exists for tests alone. "Index"
 * is the checkpoint's index table; NumPy-style indexing is a "subscript"
 * (dvar_subscript_parse).
 *
 * Argument order. The object a call acts on comes first. A constructor
 * takes its out parameter first: dvar_reader_open(&r, path, opts), and
 * likewise the calls that build a value from a description
 * (dvar_shape_init, dvar_slice_parse, dvar_partitioner_parse,
 * dvar_dtype_from_name, dvar_checkpoint_state_read). A query takes its out
 * parameters last:
 * dvar_reader_var(r, i, &info), dvar_shape_num_bytes(&shape, dtype, &n),
 * dvar_slice_intersect(&a, &b, &out). A call that fills a caller's buffer
 * takes the buffer and its length together, in that order (dst, dst_bytes).
 */
#ifndef DVAR_DVAR_H
#define DVAR_DVAR_H

#include "attrs.h"
#include "common.h"
#include "core.h"
#include "format.h"
#include "input.h"
#include "restore.h"
#include "runtime.h"
#include "sharding.h"
#include "store.h"

#endif
