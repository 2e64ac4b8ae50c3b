/*
 * format/format.h - private to libdvar: the in-memory form of a checkpoint's
 * index, its encoding (entry.c), the LevelDB table behind it (index.cc) and
 * the file-system helpers the writer, reader and root code share (fsutil.c).
 * docs/FORMAT.md describes the same bytes for people.
 */
#ifndef DVAR_FORMAT_PRIVATE_H
#define DVAR_FORMAT_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "dvar/format.h"

DVAR_BEGIN_DECL

#define DVAR_FORMAT_VERSION 4     /* what this code reads (4: packed chunks) */
#define DVAR_FORMAT_MIN_READER 1  /* a full checkpoint's oldest reader (1 skips attributes) */
#define DVAR_FORMAT_FULL 2        /* the version of a full checkpoint (2: variable attributes) */
#define DVAR_FORMAT_DELTA 3       /* a delta's version and oldest reader (3: deltas) */
#define DVAR_FORMAT_PACKED 4      /* ... of a checkpoint holding a packed chunk (FORMAT.md) */
#define DVAR_MAX_CHAIN 1000       /* links below a delta: its base, ..., the full checkpoint */
#define DVAR_MAGIC "DVAR"
#define DVAR_ALIGN 4096u          /* chunks of large slices start at a multiple of this (a page);
                                     so does every data file's size */
#define DVAR_PACK_MAX (64u << 10) /* slices of fewer raw bytes are packed (FORMAT.md, "Data files") */
#define DVAR_PACK_ALIGN 64u       /* a packed chunk starts at a multiple of this */
#define DVAR_BLOCK_SIZE 65536u    /* checksum block of raw chunks */
#define DVAR_MAX_NAME 1024
#define DVAR_MAX_CHUNK (1u << 30)   /* lz4 sizes are ints */
#define DVAR_INDEX_NAME "index"
#define DVAR_POINTER_NAME "checkpoint"
#define DVAR_MAX_PARTS 99999      /* data file names have 5 digits */
#define DVAR_MAX_TOKEN DVAR_TOKEN_MAX
#define DVAR_TOKEN_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
#define DVAR_PART_MAGIC "DVPT"
#define DVAR_PART_VERSION 2       /* the part entries' encoding (2: deltas) */

/* The bytes n raw bytes of a slice take in a data file, padding included
 * ("Data files"): packed under DVAR_PACK_MAX, a page each above. */
static inline uint64_t dvar_disk_bytes(uint64_t n)
{
	uint64_t a = n < DVAR_PACK_MAX ? DVAR_PACK_ALIGN : DVAR_ALIGN;
	return (n + a - 1) / a * a;
}

/* WHOLE is never written: a TensorBundle entry read as one raw chunk that
 * has no block checksums, only one over the whole chunk (format/tf.h). */
enum { DVAR_CODEC_RAW = 0, DVAR_CODEC_LZ4 = 1, DVAR_CODEC_WHOLE = 2 };

/* One chunk of a saved slice: raw bytes [i*chunk_size, ...) of the slice. */
typedef struct {
	uint64_t offset;      /* in its data file, DVAR_ALIGN- or DVAR_PACK_ALIGN-aligned */
	uint64_t stored;      /* bytes in the file (= raw length when raw) */
	uint32_t crc;         /* crc32c of the chunk's raw bytes */
	uint8_t codec;        /* DVAR_CODEC_* */
	uint32_t first_block; /* raw chunks: index into the slice's block_crcs */
} dvar_chunk;

/* One saved slice of a variable. */
typedef struct {
	dvar_slice slice;      /* first: dvar_slice_overlaps reads arrays of entries as slices */
	uint32_t file;         /* data file id */
	uint64_t chunk_size;   /* raw bytes per chunk (the last may be shorter) */
	uint64_t raw_bytes;    /* the slice's byte count */
	size_t num_chunks;
	dvar_chunk *chunks;
	size_t num_block_crcs;
	uint32_t *block_crcs;  /* per DVAR_BLOCK_SIZE block of each raw chunk */
} dvar_slice_entry;

/* One attribute of a variable: NUL-free strings, bounds in dvar/format.h. */
typedef struct {
	char *key;
	char *value;
} dvar_attr;

/*
 * What a variable of a delta holds (docs/FORMAT.md, "Deltas"): its own
 * slices, nothing (the base's value), or rows that replace the base's.
 */
enum { DVAR_DELTA_WHOLE = 0, DVAR_DELTA_SAME = 1, DVAR_DELTA_ROWS = 2 };

/* A row patch's piece: num_rows rows of the variable, by their ids. */
typedef struct {
	int64_t first_row, last_row; /* the smallest and largest id */
	uint64_t num_rows;
	dvar_slice_entry ids;        /* int64 [num_rows]: the ids, increasing */
	dvar_slice_entry rows;       /* [num_rows, dims 1..]: the rows, in the ids' order */
	int64_t *loaded;             /* reader: the ids once read and checked */
} dvar_piece;

/* One variable: the index's "v" entry plus its "s" entries. */
typedef struct {
	char *name;
	int dtype;
	dvar_shape shape;
	uint64_t raw_bytes;
	uint64_t stored_bytes;
	size_t num_slices;
	dvar_slice_entry *slices;
	size_t num_attrs;
	dvar_attr *attrs;      /* sorted by key (bytewise), keys unique */
	/* Version 3 (a delta): DVAR_DELTA_*, and the pieces of a row patch. */
	uint32_t delta;
	size_t num_pieces;
	dvar_piece *pieces;
	/* Writer: the largest end row of the slices added so far
	 * (dvar_slice_overlaps), and the room in slices and pieces. */
	int64_t rows_end;
	size_t cap_slices, cap_pieces;
	/* Reader of a delta: the variable's index in the base's reader. */
	size_t base_index;
} dvar_var_entry;

/* A link of a delta's chain: a checkpoint of the same directory, and the
 * CRC-32C of its index file, which tells it from any other of that name. */
typedef struct {
	char *name;
	uint32_t index_crc;
} dvar_link;

/* The header entry. */
typedef struct {
	uint32_t version;
	uint32_t min_reader;
	uint32_t num_files;
	uint64_t *file_sizes;
	uint32_t block_size;
	uint64_t num_vars;
	/* Version 3: the links below this delta (base first, the full one
	 * last); none in a full checkpoint. */
	size_t chain_len;
	dvar_link *chain;
} dvar_header;

/* ---------------------------------------------------------------- entry.c */

/* A growable byte buffer; free data with free(). */
typedef struct {
	unsigned char *data;
	size_t len, cap;
} dvar_bytes;

int dvar_bytes_reserve(dvar_bytes *b, size_t extra);
int dvar_bytes_put(dvar_bytes *b, const void *p, size_t n);
int dvar_bytes_put_varint(dvar_bytes *b, uint64_t v);
int dvar_bytes_put_u32(dvar_bytes *b, uint32_t v);

/* Index keys: "" (header), "v"+name (variable), "s"+name+"\0"+u32 BE (slice),
 * "p"+name+"\0"+u32 BE (a row patch's piece, version 3). */
/* LevelDB's order of keys (bytewise, a prefix first): <0, 0, >0. */
int dvar_key_cmp(const void *a, size_t alen, const void *b, size_t blen);
int dvar_key_var(dvar_bytes *out, const char *name);
int dvar_key_slice(dvar_bytes *out, const char *name, uint32_t j);
int dvar_key_piece(dvar_bytes *out, const char *name, uint32_t j);

/* From version 3 on, the chain follows (a delta's links; none in a full
 * checkpoint of version 4). */
int dvar_header_encode(dvar_bytes *out, const dvar_header *h);
/* deltas (version 3 on): the fields delta and num_pieces follow the attributes. */
int dvar_var_encode(dvar_bytes *out, const dvar_var_entry *v, int deltas);
int dvar_slice_entry_encode(dvar_bytes *out, const dvar_slice_entry *s);
int dvar_piece_encode(dvar_bytes *out, const dvar_piece *pc);

/* Decoders check every field; errors are DVAR_ECORRUPT naming `what`. */
int dvar_header_decode(dvar_header *out, const void *p, size_t n);
int dvar_var_decode(dvar_var_entry *out, const char *name, const void *p, size_t n, int deltas);
int dvar_slice_entry_decode(dvar_slice_entry *out, const void *p, size_t n, const char *what);
int dvar_piece_decode(dvar_piece *out, const void *p, size_t n, const char *what);

void dvar_header_clear(dvar_header *h);
void dvar_slice_entry_clear(dvar_slice_entry *s);
void dvar_piece_clear(dvar_piece *pc);
void dvar_var_entry_clear(dvar_var_entry *v);
/* A copy of n links (names duplicated) into *out; free with dvar_links_free. */
int dvar_links_copy(dvar_link **out, const dvar_link *links, size_t n);
void dvar_links_free(dvar_link *links, size_t n);

/* DVAR_EINVAL unless key and value (lengths given) fit the attribute bounds. */
int dvar_attr_check(const char *key, size_t klen, const char *value, size_t vlen);
/* Set (or replace) key in v's sorted attributes. */
int dvar_var_set_attr(dvar_var_entry *v, const char *key, const char *value);
/* 1 when a and b hold the same attributes. */
int dvar_attrs_equal(const dvar_var_entry *a, const dvar_var_entry *b);

/*
 * Every check that makes reads of v safe: slices inside the shape with the
 * variable's rank, byte counts that add up, files below num_files, chunk
 * sizes that hold whole elements, no overlapping slices. DVAR_ECORRUPT
 * naming `what` ("index entry", "part 2 entry").
 */
int dvar_var_check(const dvar_var_entry *v, uint32_t num_files, const char *what);

/*
 * One part's entries (dvar_writer_finish_part): what one process wrote into
 * its data file of a checkpoint written by several. FORMAT.md, "Part entries".
 */
typedef struct {
	uint32_t part, nparts;
	char token[DVAR_MAX_TOKEN + 1];
	size_t chain_len;      /* the base chain this part wrote a delta over */
	dvar_link *chain;
	uint64_t file_size;
	size_t num_vars;
	dvar_var_entry *vars;  /* sorted by name, names unique */
} dvar_part;

/* Encode vars (any order; pointers borrowed) as part entries. */
int dvar_part_encode(dvar_bytes *out, const dvar_part *p, dvar_var_entry *const *vars);
/* Decode and check everything (dvar_var_check included); DVAR_ECORRUPT otherwise. */
int dvar_part_decode(dvar_part *out, const void *p, size_t n);
void dvar_part_clear(dvar_part *p);

/* Raw length of chunk i of s, and the number of checksum blocks it has. */
uint64_t dvar_chunk_raw_len(const dvar_slice_entry *s, size_t i);
uint32_t dvar_chunk_num_blocks(const dvar_slice_entry *s, size_t i);

/* "data-00001-of-00004" into buf (at least 32 bytes). */
void dvar_data_file_name(char *buf, size_t cap, uint32_t file, uint32_t num_files);

/* ---------------------------------------------------------------- slices.c */

/*
 * Whether slice s shares an element with one of the n slices at base, each
 * stride bytes after the one before (dvar_slice, or dvar_slice_entry): 1
 * with *which the first such, 0 when none. *rows_end is the largest end row
 * of those n (0 for none): a slice starting at or after it overlaps none,
 * so slices added in row order (a reshard adds thousands) cost one step
 * each instead of a look at every earlier one. It is raised to s's end row
 * here; raising it for a slice that is then not kept costs speed only.
 * The caller picks the error: a writer's caller adding an overlapping
 * slice is DVAR_ESHAPE (DVAR_EINVAL in tfwriter.c, as TensorFlow's
 * AddSlice checks say), an index read from disk that has one DVAR_ECORRUPT.
 */
int dvar_slice_overlaps(const dvar_slice *s, const void *base, size_t n, size_t stride,
                        int64_t *rows_end, size_t *which);

/* s as messages name it ("4,6:-", "(scalar)"), into buf (256 bytes suffice). */
void dvar_slice_describe(char *buf, size_t cap, const dvar_slice *s, const dvar_shape *full);

/*
 * A slice whose bytes come in pieces (begin, writes, end), counted the same
 * way by both writers. Messages name it "slice 4,6:-", or `whole` (a static
 * string: "the whole variable") when it covers its variable.
 */
typedef struct {
	int open;
	uint64_t bytes;         /* what the slice holds */
	uint64_t done;          /* bytes received so far */
	dvar_slice slice;
	dvar_shape shape;
	const char *whole;
} dvar_stream;

void dvar_stream_begin(dvar_stream *st, const dvar_slice *s, const dvar_shape *full,
                       uint64_t bytes, const char *whole);
/* Count len more bytes; DVAR_EINVAL when they pass the slice's end. */
int dvar_stream_take(dvar_stream *st, size_t len);
/* Close the slice; DVAR_EINVAL (still open) when bytes are missing. */
int dvar_stream_end(dvar_stream *st);

/* ---------------------------------------------------------------- index.cc */

typedef struct dvar_index_builder dvar_index_builder;

/* Data blocks of the table: TensorFlow's TableBuilderOptions block_size. */
#define DVAR_INDEX_BLOCK_SIZE (256u << 10)

/* A new table file at path; keys must be added in strictly increasing order. */
int dvar_index_builder_open(dvar_index_builder **out, const char *path);
int dvar_index_builder_add(dvar_index_builder *b, const void *key, size_t klen,
                           const void *val, size_t vlen);
/* End the current data block now (no-op when it is empty): TensorFlow's
 * builder does this before an entry of 2 * DVAR_INDEX_BLOCK_SIZE bytes or more. */
int dvar_index_builder_flush(dvar_index_builder *b);
/* Finish the table, fsync it when sync is set (not DVAR_WRITE_NO_FSYNC), and close it. */
int dvar_index_builder_finish(dvar_index_builder *b, int sync);
void dvar_index_builder_free(dvar_index_builder *b);

typedef int (*dvar_index_visit_fn)(void *ud, const void *key, size_t klen,
                                   const void *val, size_t vlen);

/* An index (dvar's or TensorFlow's) larger than this is not one a writer made. */
#define DVAR_INDEX_MAX ((size_t)1 << 31)

/* Read the table at path whole, verify block checksums and visit every entry in order. */
int dvar_index_scan(const char *path, dvar_index_visit_fn fn, void *ud);
/* The same over the len bytes of a table read from path (named in messages). */
int dvar_index_scan_bytes(const char *path, const void *bytes, size_t len, dvar_index_visit_fn fn,
                          void *ud);

/* The bytes a writer has written into its data file so far. */
uint64_t dvar_writer_data_bytes(const dvar_writer *w);

/* ---------------------------------------------------------------- delta.c */

/* The header of the checkpoint at dir (its index scanned no further) and
 * the CRC-32C of its index file. */
int dvar_link_peek(const char *dir, dvar_header *out, uint32_t *index_crc);
/* The same, and the index file's bytes (*bytes, *len; the caller frees
 * them), which are the ones checked: a reader opens the link from them. */
int dvar_link_read(const char *dir, dvar_header *out, uint32_t *index_crc, char **bytes,
                   size_t *len);
/* The chain of a delta over the checkpoint at base: base's name and index
 * CRC, then base's own chain. Free with dvar_links_free. */
int dvar_chain_over(const char *base, dvar_link **chain, size_t *len);

/* ---------------------------------------------------------------- fsutil.c */

/* Test hook: called at named points of a save (see tests/unit/format). */
extern void (*dvar__fault_hook)(const char *point);
/* Test knob: microseconds added to every timed lz4 call of a writer, as if
 * the CPU were busy (DVAR_COMPRESS_AUTO then stops compressing). */
extern unsigned dvar__lz4_delay_us;
#define DVAR_FAULT_POINT(name) do { if (dvar__fault_hook) dvar__fault_hook(name); } while (0)

char *dvar_path_join(const char *a, const char *b);           /* malloc'ed; NULL on ENOMEM */
char *dvar_path_parent(const char *path);                      /* its directory ("." for none); likewise */
int dvar_fs_exists(const char *path);                         /* 1 / 0 */
int dvar_fs_is_dir(const char *path);                         /* 1 / 0 */
int dvar_fs_mkdirs(const char *path);
int dvar_fs_fsync_path(const char *path);                     /* file or directory */
int dvar_fs_rmtree(const char *path);
int dvar_fs_pwrite_all(int fd, const void *buf, size_t len, uint64_t off, const char *what);
/* Reads exactly len bytes; a short read is DVAR_ECORRUPT ("truncated"). */
int dvar_fs_pread_all(int fd, void *buf, size_t len, uint64_t off, const char *what);
int dvar_fs_read_file(const char *path, char **out, size_t *len, size_t max);
/* Write dir/name atomically: a temporary name (dvar_tmp_name), fsync, rename, fsync dir;
 * without sync (DVAR_WRITE_NO_FSYNC), no fsync. */
int dvar_fs_write_atomic(const char *dir, const char *name, const void *data, size_t len,
                         int sync);
/* Rename that fails with DVAR_EEXISTS when to exists (even as an empty directory). */
int dvar_fs_rename_noreplace(const char *from, const char *to);
uint64_t dvar_fs_dir_bytes(const char *path);      /* regular files, one level */

/*
 * Temporary names (docs/FORMAT.md, "Temporary names"): whatever a writer
 * creates before it commits is the hidden sibling
 *
 *   .<final-name>.dvartmp-<tag>     tag = <host>-<pid>-<random>
 *
 * of what it becomes: host is this host's name with every byte outside
 * [A-Za-z0-9_-] made '_', cut to DVAR_TMP_HOST_MAX bytes; random is
 * DVAR_TMP_RANDOM characters of [a-z0-9]. A tag is also a valid save token
 * (DVAR_TOKEN_CHARS), so a multi-part save whose token is its chief's tag
 * names the process that owns it; any other token gives a temporary name
 * whose writer is unknown, which only dvar_writer_abort_parts removes.
 */
#define DVAR_TMP_MARK ".dvartmp-"
#define DVAR_TMP_HOST_MAX 32
#define DVAR_TMP_RANDOM 12
#define DVAR_TMP_TAG_MAX (DVAR_TMP_HOST_MAX + 1 + 10 + 1 + DVAR_TMP_RANDOM)

/* A new tag of this process into tag (DVAR_TMP_TAG_MAX + 1 bytes). */
void dvar_tmp_tag(char *tag);
/* dirname(path)/.<basename(path)>.dvartmp-<tag>, malloc'ed; tag NULL: a new one. */
int dvar_tmp_name(const char *path, const char *tag, char **out);

/* What a temporary name says. */
typedef struct {
	size_t target_len;                    /* the final name: name + 1, target_len bytes */
	char host[DVAR_TMP_HOST_MAX + 1];     /* "" when the tag is not <host>-<pid>-<random> */
	long pid;                             /* 0 then */
} dvar_tmp_info;

/* 1 when name (a directory entry's name) is a temporary name, *out filled; 0 otherwise. */
int dvar_tmp_parse(const char *name, dvar_tmp_info *out);
/* 1 while its writer runs (this host, pid alive and not a zombie), 0 when it is gone, -1 when
 * that cannot be told here (another host, or no pid in the name). */
int dvar_tmp_writer_alive(const dvar_tmp_info *t);
/*
 * Remove (rmtree) every temporary entry of dir whose writer is gone: written
 * on this host by a pid that no longer exists (kill(pid, 0) fails with
 * ESRCH). Others' are never touched. Best effort: what cannot be removed
 * stays for the next sweep, and the thread's error is left as it was.
 */
void dvar_tmp_sweep(const char *dir);

/* ---------------------------------------------------------------- root.c */

/*
 * The pointer file: a `checkpoint` state file (state.c) whose names are
 * checkpoint directories under the root (no '/'). DVAR_ENOTFOUND when absent.
 */
int dvar_pointer_read(dvar_checkpoint_state *out, const char *root);
/*
 * Take root's save lock (root/.dvar-lock, an flock the kernel drops when
 * its process dies): *fd holds it until closed. DVAR_EBUSY naming the
 * holder (pid and host) when another writer holds it.
 */
#define DVAR_LOCK_NAME ".dvar-lock"
int dvar_root_lock(const char *root, int *fd);
/* Replace root's pointer file with p (dvar_fs_write_atomic, sync as there). */
int dvar_pointer_write(const char *root, const dvar_checkpoint_state *p, int sync);

/* ---------------------------------------------------------------- state.c */

/* The largest `checkpoint` state file read, and the fields dvar writes. */
#define DVAR_STATE_MAX (1u << 20)
#define DVAR_STATE_LATEST "model_checkpoint_path"
#define DVAR_STATE_ALL "all_model_checkpoint_paths"

/*
 * Parse the text (len bytes) of a `checkpoint` state file as TensorFlow's
 * text-format parser parses a CheckpointState (docs/FORMAT.md, "The pointer
 * file"). what names the file in messages: DVAR_ECORRUPT "'what' line L:
 * ...". On failure *out is empty.
 */
int dvar_checkpoint_state_parse(dvar_checkpoint_state *out, const char *text, size_t len,
                                const char *what);

/* Sort checkpoint names by the step after their last '-', then by name. */
void dvar_names_sort(char **names, size_t n);

/* "a", "a and b", "a, b and c" into buf (the first 8 names, then "and N more"). */
void dvar_names_join(char *buf, size_t cap, char *const *names, size_t n);

/* Resolve a checkpoint directory or a root (its latest) to a malloc'ed directory path;
 * a root whose latest is missing is DVAR_ENOTFOUND naming the checkpoints it holds. */
int dvar_resolve_checkpoint(const char *path, char **out);

/* *listed: root's pointer file names checkpoint name (0 when it has no pointer file). */
int dvar_root_listed(const char *root, const char *name, int *listed);

/*
 * root/name is about to be saved: a checkpoint there that the pointer file
 * does not list was left by a save of the same step that failed after its
 * commit's rename and before the pointer file; it was never published, and
 * the new save replaces it (deleted here, as retention deletes). A listed
 * one stays, for the open to refuse. Under the root's save lock only.
 */
int dvar_root_drop_unlisted(const char *root, const char *name);

/* After committing root/name: make it latest, keep the last keep_last (0 = all);
 * sync: the pointer file is fsynced (not DVAR_WRITE_NO_FSYNC). */
int dvar_root_publish(const char *root, const char *name, int keep_last, int sync);

/* ---------------------------------------------------------------- reader.c */

/* Variable i's entry as the reader holds it (NULL when out of range), and
 * whether it reads a TensorFlow checkpoint: for restore/digest.c, which
 * combines chunk checksums without reading. */
const dvar_var_entry *dvar_reader_entry(const dvar_reader *r, size_t i);
int dvar_reader_is_tf(const dvar_reader *r);
/* *out = opts (NULL: the defaults) as this library's version of the struct,
 * the fields its version lacks at their defaults; DVAR_EINVAL for a
 * version this library does not know, or flags it does not. */
int dvar_read_options_take(dvar_read_options *out, const dvar_read_options *opts);
/* For tests: how readers use O_DIRECT (AUTO: large uncached reads;
 * ALWAYS: cached or not; REFUSED: as if every file system refused it), and
 * how many of a reader's bytes it read with O_DIRECT, or through a bounce
 * buffer (a destination the kernel's copy is slow into: reader.c,
 * read_buffered). */
enum { DVAR_DIRECT_AUTO, DVAR_DIRECT_OFF, DVAR_DIRECT_ALWAYS, DVAR_DIRECT_REFUSED };
enum { DVAR_VIA_DIRECT, DVAR_VIA_BOUNCE };
void dvar_reader__direct(int mode);
uint64_t dvar_reader__bytes_via(const dvar_reader *r, int way);

DVAR_END_DECL

#endif
