/*
 * cli/shard.c - what reshard, export and import share about sharded
 * variables: which variables are sharded, the attributes a variable gets
 * when it is written as n div-layout shards, and copying any region of a
 * variable from a reader into a streamed writer slice (or any other sink)
 * in bounded pieces, so that memory does not grow with the variable; and
 * the frame of reshard and export: IN opened for OUT, every variable
 * copied with progress, the new checkpoint committed.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

int cli_var_is_sharded(const dvar_reader *r, size_t i)
{
	dvar_var_info v;
	const char *kind;

	if (dvar_reader_var(r, i, &v) != DVAR_OK)
		return 0;
	if (v.num_slices > 1)
		return 1;
	return dvar_reader_var_attr(r, i, DVAR_STORE_ATTR_KIND, &kind) == DVAR_OK &&
	       strcmp(kind, CLI_KIND_SHARDED) == 0;
}

int cli_layout(const char *cmd, const char *name, const dvar_shape *shape, int64_t want,
               int64_t **offsets, int64_t *n)
{
	int64_t rows = shape->rank ? shape->dims[0] : 1;
	int64_t cap = want < rows ? want : rows;

	*offsets = malloc((size_t)(cap > 0 ? cap + 1 : 2) * sizeof(int64_t));
	if (!*offsets)
		return cli_error(cmd, "out of memory");
	if (shape->rank == 0) {
		/* A scalar has no rows to split: one shard, the whole of it. */
		(*offsets)[0] = 0;
		(*offsets)[1] = 1;
		*n = 1;
		return CLI_EXIT_OK;
	}
	if (dvar_div_layout(rows, want, *offsets, n) != DVAR_OK) {
		free(*offsets);
		*offsets = NULL;
		return cli_error(cmd, "variable '%s': %s", name, cli_dvar_message());
	}
	return CLI_EXIT_OK;
}

void cli_shard_slice(const dvar_shape *shape, const int64_t *offsets, int64_t k, dvar_slice *out)
{
	dvar_slice_full(out, shape);
	if (shape->rank) {
		out->start[0] = offsets[k];
		out->length[0] = offsets[k + 1] - offsets[k];
	}
}

/* The attributes a layout of n shards owns. */
static int is_layout_attr(const char *key, const char *value)
{
	return strcmp(key, DVAR_SHARDING_ATTR_SHARDS) == 0 ||
	       strcmp(key, DVAR_SHARDING_ATTR_LAYOUT) == 0 ||
	       (strcmp(key, DVAR_STORE_ATTR_KIND) == 0 && strcmp(value, CLI_KIND_SHARDED) == 0);
}

int cli_set_shard_attrs(dvar_writer *w, const char *name, int64_t n)
{
	char count[32];

	if (n <= 1)
		return DVAR_OK;
	snprintf(count, sizeof(count), "%lld", (long long)n);
	int rc = dvar_writer_set_attr(w, name, DVAR_STORE_ATTR_KIND, CLI_KIND_SHARDED);
	if (rc == DVAR_OK)
		rc = dvar_writer_set_attr(w, name, DVAR_SHARDING_ATTR_SHARDS, count);
	if (rc == DVAR_OK)
		rc = dvar_writer_set_attr(w, name, DVAR_SHARDING_ATTR_LAYOUT, CLI_LAYOUT_DIV);
	return rc;
}

int cli_copy_attrs(const dvar_reader *r, size_t i, dvar_writer *w, const char *name, int64_t n)
{
	size_t count = dvar_reader_var_num_attrs(r, i);
	const char *key, *value;
	int rc = DVAR_OK;

	for (size_t k = 0; rc == DVAR_OK && k < count; k++) {
		if ((rc = dvar_reader_var_attr_at(r, i, k, &key, &value)) != DVAR_OK)
			break;
		/* A new layout replaces the old one's attributes. One shard has none
		 * and is a plain variable, as dvar_save writes a one-shard variable. */
		if (n > 0 && is_layout_attr(key, value)) {
			if (n == 1 && strcmp(key, DVAR_STORE_ATTR_KIND) == 0)
				rc = dvar_writer_set_attr(w, name, key, CLI_KIND_PLAIN);
			continue;
		}
		rc = dvar_writer_set_attr(w, name, key, value);
	}
	if (rc == DVAR_OK && n > 0)
		rc = cli_set_shard_attrs(w, name, n);
	return rc;
}

/* ------------------------------------------------------------- copying */

#define STREAM_PIECE_BYTES (8u << 20)

void cli_copier_init(cli_copier *c, const char *cmd, cli_progress *pr, uint64_t total)
{
	memset(c, 0, sizeof(*c));
	c->cmd = cmd;
	c->pr = pr;
	c->total = total;
}

void cli_copier_free(cli_copier *c)
{
	free(c->buf);
	c->buf = NULL;
	c->cap = 0;
}

int cli_copy_pieces(cli_copier *c, dvar_reader *r, size_t i, int dtype, const dvar_slice *region,
                    cli_piece_fn fn, void *ctx)
{
	size_t esize = dvar_dtype_size(dtype);
	uint64_t budget = cli_walk_budget(esize), n, total;
	dvar_slice piece;
	cli_walk walk;

	/* A few writer chunks per piece: enough for the reader's threads. */
	if (budget > STREAM_PIECE_BYTES / esize)
		budget = STREAM_PIECE_BYTES / esize;
	if (dvar_slice_num_elements(region, &total) != DVAR_OK)
		return cli_error_dvar(c->cmd);
	uint64_t need = (total < budget ? total : budget) * esize;
	if (need > c->cap) {
		free(c->buf);
		c->cap = 0;
		if (!(c->buf = malloc((size_t)need)))
			return cli_error(c->cmd, "out of memory (%llu bytes of read buffer)",
			                 (unsigned long long)need);
		c->cap = need;
	}
	cli_walk_init(&walk, region, budget);
	while (cli_walk_next(&walk, &piece, &n)) {
		if (dvar_reader_read(r, i, &piece, c->buf, n * esize) != DVAR_OK)
			return cli_error_dvar(c->cmd);
		int rc = fn(ctx, c->buf, n * esize);
		if (rc != CLI_EXIT_OK)
			return rc;
		c->done += n * esize;
		if (c->pr)
			cli_progress_update(c->pr, c->done, c->total);
	}
	return CLI_EXIT_OK;
}

typedef struct {
	dvar_writer *w;
	const char *cmd;
} write_sink;

static int to_writer(void *ctx, const void *data, uint64_t bytes)
{
	write_sink *s = ctx;

	if (dvar_writer_write(s->w, data, (size_t)bytes) != DVAR_OK)
		return cli_error_dvar(s->cmd);
	return CLI_EXIT_OK;
}

int cli_copy_region(cli_copier *c, dvar_reader *r, size_t i, const dvar_var_info *v,
                    dvar_writer *w, const dvar_slice *region)
{
	write_sink sink = { w, c->cmd };

	if (dvar_writer_begin_slice(w, v->name, v->dtype, &v->shape, region) != DVAR_OK)
		return cli_error_dvar(c->cmd);
	int rc = cli_copy_pieces(c, r, i, v->dtype, region, to_writer, &sink);
	if (rc == CLI_EXIT_OK && dvar_writer_end_slice(w) != DVAR_OK)
		rc = cli_error_dvar(c->cmd);
	return rc;
}

int cli_stream_threads(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	return cpus < 1 ? 1 : cpus > CLI_STREAM_THREADS ? CLI_STREAM_THREADS : (int)cpus;
}

/* ------------------------------------------------------------- IN to OUT */

int cli_open_in_out(const char *cmd, const char *in, const char *out, const char *what,
                    dvar_reader **r)
{
	dvar_read_options ro = DVAR_READ_OPTIONS_INIT;
	struct stat st;

	if (lstat(out, &st) == 0)
		return cli_error(cmd, "'%s' already exists; give a new %s for OUT", out, what);
	ro.threads = cli_stream_threads();
	if (dvar_reader_open(r, in, &ro) != DVAR_OK)
		return cli_error_dvar(cmd);
	return CLI_EXIT_OK;
}

int cli_each_var(const char *cmd, dvar_reader *r, dvar_writer *w, int progress, uint64_t total,
                 cli_var_fn fn, void *ctx)
{
	dvar_var_info v;
	cli_progress pr;
	cli_copier c;
	int rc = CLI_EXIT_OK;

	cli_progress_init(&pr, cmd, progress, 0);
	cli_copier_init(&c, cmd, &pr, total);
	for (size_t i = 0; rc == CLI_EXIT_OK && i < dvar_reader_num_vars(r); i++) {
		if (dvar_reader_var(r, i, &v) != DVAR_OK)
			rc = cli_error_dvar(cmd);
		else
			rc = fn(ctx, &c, r, i, &v, w);
	}
	if (rc == CLI_EXIT_OK && w && dvar_writer_commit(w) != DVAR_OK)
		rc = cli_error_dvar(cmd);
	cli_progress_end(&pr);
	cli_copier_free(&c);
	return rc;
}

int cli_rewrite(const char *cmd, dvar_reader *r, const char *out, uint64_t chunk_size,
                dvar_compress compress, int progress, uint64_t total, cli_var_fn fn, void *ctx)
{
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w = NULL;
	int rc;

	wo.chunk_size = chunk_size;
	wo.compress = compress;
	wo.threads = cli_stream_threads();
	if (dvar_writer_open(&w, out, &wo) != DVAR_OK)
		return cli_error_dvar(cmd);
	rc = cli_each_var(cmd, r, w, progress, total, fn, ctx);
	dvar_writer_free(w);
	return rc;
}
