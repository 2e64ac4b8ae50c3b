/*
 * format/tf.h - private to libdvar: TensorFlow's TensorBundle (the V2
 * checkpoint: PREFIX.index, a LevelDB table, plus PREFIX.data-NNNNN-of-MMMMM)
 * at the level of bytes: the protobuf messages its index holds and the
 * string tensors' layout (tfproto.c), the keys of sliced tensors
 * (slicekey.c), its masked checksums, locating a bundle and opening its
 * index (tf.c). The reader (reader.c) presents a bundle as a dvar
 * checkpoint through these; the TensorBundle writer (tfwriter.c) encodes
 * with them. ../shared/reference/tf-behavior.md §4 is the specification;
 * docs/FORMAT.md, "TensorFlow checkpoints", says what dvar does with it.
 *
 * Every decoder is bounded: it reads only inside the n bytes it is given,
 * allocates at most what the input's own length justifies, rejects ranks
 * above DVAR_MAX_RANK, negative or overflowing sizes and malformed varints,
 * skips unknown fields, and fails with DVAR_ECORRUPT saying what and where
 * ("index entry 'w': field 5 (size): truncated varint"). Two limits of dvar
 * rather than damage are DVAR_ENOTSUPP: a shape of more than DVAR_MAX_RANK
 * dimensions, and an entry listing more than 100000 slices. Decoded structs
 * own their allocations; the _clear functions release them.
 */
#ifndef DVAR_FORMAT_TF_H
#define DVAR_FORMAT_TF_H

#include <stddef.h>
#include <stdint.h>

#include "format/format.h"

DVAR_BEGIN_DECL

#define DVAR_TF_DT_STRING 7         /* TensorFlow's DT_STRING */
#define DVAR_TF_BUNDLE_VERSION 1    /* kTensorBundleVersion: what the writer records as producer */
#define DVAR_TF_MASK_DELTA 0xa282ead8u

/* ---------------------------------------------------------------- checksums */

/** TensorFlow's masked CRC-32C: ((c >> 15) | (c << 17)) + 0xa282ead8. */
uint32_t dvar_tf_crc_mask(uint32_t crc);
uint32_t dvar_tf_crc_unmask(uint32_t masked);

/* ---------------------------------------------------------------- dtypes */

/** TensorFlow's name of a DataType ("float", "string", "complex64", ...); NULL when unknown. */
const char *dvar_tf_dtype_name(int dtype);

/**
 * Bytes per element of a fixed-width TensorFlow dtype (dvar's dtypes plus
 * complex64/128, the quantized ints, the float8s and int4/uint4, stored one
 * per byte); 0 for string, resource, variant and unknown numbers.
 */
size_t dvar_tf_dtype_size(int dtype);

/* ---------------------------------------------------------------- messages */

/** BundleHeaderProto. */
typedef struct {
	int32_t num_shards;
	int32_t endianness;       /* 0 LITTLE, 1 BIG */
	int32_t producer;         /* VersionDef */
	int32_t min_consumer;
	size_t num_bad_consumers;
	int32_t *bad_consumers;
} dvar_tf_header;

int dvar_tf_header_decode(dvar_tf_header *out, const void *p, size_t n);
int dvar_tf_header_encode(dvar_bytes *out, const dvar_tf_header *h);
void dvar_tf_header_clear(dvar_tf_header *h);

/**
 * Check a decoded header as TensorFlow's BundleReader does (versions with
 * TF's texts, endianness: big-endian bundles are DVAR_ENOTSUPP, num_shards
 * >= 1 and <= DVAR_MAX_PARTS + 1). what names the bundle in messages.
 */
int dvar_tf_header_check(const dvar_tf_header *h, const char *what);

/** A TensorSliceProto: per dimension start and length, length -1 = the whole dimension. */
typedef struct {
	int32_t rank;
	int64_t start[DVAR_MAX_RANK];
	int64_t length[DVAR_MAX_RANK];
} dvar_tf_slice;

/** BundleEntryProto. */
typedef struct {
	int32_t dtype;            /* TF's DataType (dvar's dtypes use the same numbers) */
	dvar_shape shape;
	int32_t shard_id;
	int64_t offset;
	int64_t size;
	uint32_t crc32c;          /* masked, as stored */
	size_t num_slices;        /* > 0: a partitioned tensor's full entry */
	dvar_tf_slice *slices;
} dvar_tf_entry;

/** what names the entry in messages (its key, printable). */
int dvar_tf_entry_decode(dvar_tf_entry *out, const void *p, size_t n, const char *what);
/** Proto3 encoding as TensorFlow writes it (defaults omitted, shape always present). */
int dvar_tf_entry_encode(dvar_bytes *out, const dvar_tf_entry *e);
void dvar_tf_entry_clear(dvar_tf_entry *e);

/** The dvar slice a TensorSliceProto selects of shape (full dimensions resolved); DVAR_ECORRUPT when outside. */
int dvar_tf_slice_resolve(const dvar_tf_slice *t, const dvar_shape *shape, dvar_slice *out,
                          const char *what);
/** The TensorSliceProto of a dvar slice of shape: full dimensions as length -1. */
void dvar_tf_slice_from(const dvar_slice *s, const dvar_shape *shape, dvar_tf_slice *out);

/* ---------------------------------------------------------------- keys */

/**
 * EncodeTensorNameSlice: the key of one slice's data entry,
 * NumIncreasing(0) String(full_key) NumIncreasing(rank) then per dimension
 * Signed(start) Signed(length) (OrderedCode), a full dimension as start 0
 * and length -1.
 */
int dvar_tf_slice_key_encode(dvar_bytes *out, const char *full_key, size_t full_len,
                             const dvar_tf_slice *slice);

/**
 * DecodeTensorNameSlice: 1 when key (klen bytes) is a slice key (its first
 * byte is 0; TF's own keys never start with 0 but the header's ""), then
 * *full_key (malloc'ed, NUL-terminated, *full_len bytes) and *slice are
 * set; 0 when it is not a slice key; DVAR_ECORRUPT (negative) for a slice
 * key that does not decode.
 */
int dvar_tf_slice_key_decode(const void *key, size_t klen, char **full_key, size_t *full_len,
                             dvar_tf_slice *slice);

/* A key (n bytes) as text for messages into buf (cap bytes): printable
 * ASCII as is, other bytes as \xNN, "..." where it is cut. */
void dvar_tf_key_printable(const unsigned char *p, size_t n, char *buf, size_t cap);

/* ---------------------------------------------------------------- strings */

/**
 * A DT_STRING entry's data (size bytes at p, as stored): n varint64
 * lengths, the masked CRC-32C of the lengths (each as u32 LE, u64 LE above
 * UINT32_MAX), then the bytes. Checks the length checksum (TF's "The length
 * checksum does not match" text) and that the lengths add up to the rest;
 * lens (n entries) and *bytes_at (the offset of the first string byte in p)
 * are set. The caller checks the entry's own CRC with dvar_tf_strings_crc
 * (it is not the CRC of the size bytes as stored: see below).
 */
int dvar_tf_strings_decode(const void *p, size_t size, uint64_t n, uint64_t *lens,
                           size_t *bytes_at, const char *what);

/*
 * NOTE: a DT_STRING entry's CRC is not the CRC of its stored bytes. TF's
 * WriteStringTensor checksums each length as a u32 LE (u64 above
 * UINT32_MAX), not as the varint it stores, then the 4 length-checksum
 * bytes, then the string bytes. dvar_tf_strings_crc computes it from a
 * decoded entry (lens, bytes_at from dvar_tf_strings_decode); compare it
 * with the entry's unmasked crc32c.
 */
uint32_t dvar_tf_strings_crc(const void *p, size_t size, uint64_t n, const uint64_t *lens,
                             size_t bytes_at);

/**
 * Append a DT_STRING entry's data as TF's WriteStringTensor writes it: n
 * varint lengths, the masked length checksum, the bytes (the sum of lens,
 * back to back). *crc (when not NULL) receives the entry's unmasked CRC
 * (mask it for BundleEntryProto.crc32c).
 */
int dvar_tf_strings_encode(dvar_bytes *out, uint64_t n, const uint64_t *lens, const void *bytes,
                           uint32_t *crc);

/* ---------------------------------------------------------------- locating a bundle */

/**
 * 1 when path names a TensorBundle, with *prefix (malloc'ed) its prefix:
 * path itself when path + ".index" is a file (".../model.ckpt-100",
 * ".../variables/variables"); PREFIX when path is the file PREFIX.index;
 * for a directory holding a `checkpoint` state file (TF's text proto; dvar
 * roots have one in the same format), dir/latest when dir/latest.index is
 * a file (a dvar root's latest is a directory instead: then 0); for a
 * directory with no state file and no dvar index, dir/variables/variables
 * (a SavedModel) or its one PREFIX.index (a SavedModel's variables/).
 * 0 when path is not a bundle (the caller tries a dvar checkpoint, also
 * for a dvar root whose pointer names a missing checkpoint: its error names
 * the ones there); a negative status when it is one but broken or
 * ambiguous: a state file naming a checkpoint whose .index is missing
 * (DVAR_ENOTFOUND saying so and naming the prefixes there), a directory of
 * several prefixes (DVAR_EINVAL naming them). Relative state-file paths are
 * joined onto the directory.
 */
int dvar_tf_locate(const char *path, char **prefix);

/** a followed by b, malloc'ed ("PREFIX" ".index"); NULL when out of memory. */
char *dvar_tf_concat(const char *a, const char *b);

/** "PREFIX.data-00001-of-00004", malloc'ed (NULL when out of memory). */
char *dvar_tf_data_path(const char *prefix, uint32_t shard, uint32_t num_shards);

/**
 * Open the bundle at prefix as dvar's in-memory index: *vars (sorted by
 * name, *num_vars) with one dvar_slice_entry per saved slice, each one
 * chunk of codec DVAR_CODEC_WHOLE at the entry's offset in data file
 * shard_id, its CRC the entry's (unmasked); header->num_files = num_shards.
 * Slice-key entries become slices of their full key's variable (checked:
 * every slice the full entry lists has its data entry, with the slice's
 * shape and the full entry's dtype). String tensors keep dtype
 * DVAR_TF_DT_STRING and one chunk of their stored bytes. Every index block
 * checksum is verified (LevelDB's reader; snappy blocks included).
 */
int dvar_tf_open_index(const char *prefix, dvar_header *header, dvar_var_entry **vars,
                       size_t *num_vars);

/* Test hooks: OrderedCode's Signed() of one number (buf holds 10 bytes; returns
 * the length) and its canonical decoding (the length used, -1 when malformed). */
int dvar_tf__signed_encode(int64_t v, unsigned char *buf);
int dvar_tf__signed_decode(const unsigned char *p, size_t n, int64_t *out);

DVAR_END_DECL

#endif
