/*
 * format/writer.h - private to writer.c and parts.c: the writer of a dvar
 * checkpoint. writer.c opens it and writes its slices into its part's data
 * file; parts.c ends the part (its entries) and, in the chief, gathers every
 * part's entries into the index and commits.
 */
#ifndef DVAR_FORMAT_WRITER_H
#define DVAR_FORMAT_WRITER_H

#include <pthread.h>
#include <stdatomic.h>

#include "format/format.h"

DVAR_BEGIN_DECL

/* Chunks stored one way: the time spent encoding them (lz4, checksums,
 * copies) on the clock, the time spent writing them, their raw and their
 * stored bytes; and for the encodings whose CPU time was taken (a sample:
 * writer.c, CPU_SAMPLE), that CPU time and their time on the clock. */
typedef struct {
	atomic_uint_least64_t encode_ns, write_ns, bytes, stored, sampled_cpu_ns, sampled_ns;
} dvar_cost;

struct dvar_writer {
	char *final_dir;
	char *tmp_dir;
	char *data_path;
	char *data_shown; /* what data_path will be once committed: for messages */
	char *root; /* dvar_writer_open_step only */
	char *step_name;
	uint32_t part, nparts;
	char token[DVAR_MAX_TOKEN + 1];
	int shared;    /* a part writer: the staging directory is not ours to remove */
	int lock_fd;   /* the root's save lock (dvar_root_lock) while this writer holds it, or -1 */
	dvar_write_options opts;
	dvar_pool *pool;
	int coders;    /* pool threads that can encode at once: at most one per CPU */
	int fd;        /* buffered */
	int fd_direct; /* O_DIRECT, or -1 */
	atomic_int direct_ok;
	atomic_uint_least64_t next_offset;
	atomic_uint_least64_t alloc_end; /* the data file is allocated up to here (reserve) */
	atomic_uint_least64_t bytes_done;
	/* DVAR_COMPRESS_AUTO's accounts (writer.c, lz4_pays), by codec. */
	dvar_cost cost[2];
	atomic_uint_least64_t auto_tick, cpu_tick;
	pthread_t owner;
	double last_progress;
	const volatile sig_atomic_t *cancel; /* dvar_writer_set_cancel; borrowed */
	int broken; /* an I/O error: only dvar_writer_free is left */
	int finished; /* the data file is complete: no more adds */
	int committed;

	/* A delta (dvar_writer_set_base): the base, read for its variables'
	 * dtypes and shapes, and the chain the index records. */
	char *base_dir;
	dvar_reader *base;
	dvar_link *chain;
	size_t chain_len;

	dvar_var_entry *vars;
	size_t num_vars, cap_vars;
	uint32_t *table; /* open addressing: var index + 1, 0 = empty */
	size_t table_cap;

	dvar_stash *buffers; /* chunk buffers of buffer_size bytes, aligned */
	size_t buffer_size;

	/* A slice being streamed (dvar_writer_begin_slice): its entry is
	 * vars[stream_var].slices[num_slices], reserved but not counted yet. */
	dvar_stream stream;
	size_t stream_var;
	size_t stream_flushed;  /* chunks written so far */
	size_t stage_fill;      /* whole chunks waiting in stage[0..stage_fill) */
	uint64_t stage_pos;     /* bytes in stage[stage_fill] */
	unsigned char **stage;  /* stage_cap staging buffers of chunk_size bytes, aligned */
	size_t stage_cap;

	/* Chunks of small slices, back to back in one aligned block that is
	 * written when full or when the part ends; their offsets are relative
	 * to the block until then. */
	unsigned char *pack;
	size_t pack_fill;
	dvar_chunk **pack_chunks;
	size_t pack_n, pack_cap;
};

/* Complete the data file before a part's entries are encoded: the block of
 * packed chunks written (their offsets given), the file cut to its bytes. */
int dvar_writer_end_data(dvar_writer *w);

/* A data file of bytes took ns to fsync: the rate AUTO charges each chunk's
 * stored bytes with (writer.c, flush_ns). */
void dvar_writer_note_flush(uint64_t ns, uint64_t bytes);

/* Whether the caller's cancel flag (dvar_writer_set_cancel) is up. */
static inline int dvar_writer_cancelled(const dvar_writer *w)
{
	return w->cancel && *w->cancel;
}

/* DVAR_EINVAL unless slices may be added: not finished, broken or streaming. */
int dvar_writer_check_usable(const dvar_writer *w);

DVAR_END_DECL

#endif
