/*
 * cli/cmd_export.c - `dvar export IN OUT --single-shard`: every variable as
 * one full tensor, for serving (or, `--format tf --keep-shards`, with its
 * shards kept as TensorFlow slices). As a dvar checkpoint (uncompressed, each
 * variable one contiguous page-aligned run that dvar_reader_map maps), as
 * one safetensors file (8-byte little-endian header length, a JSON header
 * padded with spaces to a multiple of 8, then the tensors back to back), or
 * as a TensorFlow checkpoint (a TensorBundle at the prefix OUT, through
 * dvar_tf_writer), which can also keep each sharded variable's shards as
 * TensorFlow slices (--keep-shards). All stream each variable in bounded
 * pieces from whatever slices were saved; all appear at OUT only when
 * complete.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static const char *in_path;
static const char *out_path;
static int single_shard;
static int keep_shards;
static const char *format = "dvar";
static cli_args drop;
static uint64_t chunk_size;
static int progress = -1;

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "IN", NULL, &in_path, 0, CLI_OPT_REQUIRED,
	  "the checkpoint to read (a directory, or a root: its latest), or a\n"
	  "TensorFlow checkpoint (its prefix, or a directory naming it)" },
	{ CLI_OPT_ARG, "OUT", NULL, &out_path, 0, CLI_OPT_REQUIRED,
	  "what to create: a checkpoint directory, a .safetensors file, or\n"
	  "a TensorFlow checkpoint prefix (OUT.index, OUT.data-00000-of-00001);\n"
	  "it must not exist" },
	{ CLI_OPT_SWITCH, "single-shard", NULL, &single_shard, 1, 0,
	  "merge every sharded variable into one full tensor (required;\n"
	  "--format tf takes --keep-shards instead)" },
	{ CLI_OPT_SWITCH, "keep-shards", NULL, &keep_shards, 1, 0,
	  "--format tf: a variable saved in several slices (sharded) as a\n"
	  "TensorFlow partitioned tensor, one slice per saved slice, the way\n"
	  "TensorFlow saves a ShardedVariable" },
	{ CLI_OPT_STRING, "format", "FORMAT", &format, 0, 0,
	  "dvar (default): a checkpoint with every chunk raw, each variable\n"
	  "mappable in place (dvar_reader_map); safetensors: one file;\n"
	  "tf: a TensorFlow checkpoint (TensorBundle) that TensorFlow reads" },
	{ CLI_OPT_LIST, "drop-prefix", "PREFIX", &drop, 0, 0,
	  "leave out the variables whose name starts with PREFIX (optimizer\n"
	  "slots, say). Repeatable" },
	{ CLI_OPT_BYTES, "chunk-size", "BYTES", &chunk_size, 0, 0,
	  "--format dvar: raw bytes per chunk, a multiple of 4K from 4K to 1G\n(default 4M)" },
	CLI_PROGRESS_OPTS(&progress),
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"In a dvar export a sharded variable loses its shards and layout attributes\n"
	"and kind=sharded becomes kind=plain; every other attribute is kept.\n"
	"safetensors dtypes: F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32,\n"
	"U64, BOOL; variable names must be UTF-8 there, and the header's\n"
	"__metadata__ is {\"format\":\"pt\"}.\n"
	"\n"
	"--format tf writes a TensorBundle whose keys are the variable names and\n"
	"whose dtypes are TensorFlow's same-numbered DataTypes; attributes are\n"
	"dropped (TensorFlow has no place for them). Give exactly one of\n"
	"--single-shard (one plain entry per variable, for serving) and\n"
	"--keep-shards (slices as saved; a variable saved whole stays one entry).\n"
	"String tensors of a TensorFlow IN (its object graph, vocabularies) are\n"
	"copied into a TensorFlow OUT as they are, and left out of the other\n"
	"formats with a note naming each.\n"
	"\n"
	"Memory stays at a few chunks whatever the variable sizes. Nothing is\n"
	"left at OUT when the export fails.",
	NULL
};

static int dropped(const char *name)
{
	for (int k = 0; k < drop.n; k++)
		if (strncmp(name, drop.v[k], strlen(drop.v[k])) == 0)
			return 1;
	return 0;
}

static int is_tf(void)
{
	return strcmp(format, "tf") == 0;
}

/* Left out of OUT: dropped, or a string tensor where OUT cannot hold one. */
static int skipped(const dvar_var_info *v)
{
	return dropped(v->name) || (v->dtype == DVAR_DTYPE_STRING && !is_tf());
}

static int check_options(void)
{
	int rc;

	if (strcmp(format, "dvar") != 0 && strcmp(format, "safetensors") != 0 &&
	    strcmp(format, "tf") != 0)
		return cli_usage_error("export", "--format takes dvar, safetensors or tf, not '%s'",
		                       format);
	if (strcmp(format, "tf") == 0) {
		if (single_shard && keep_shards)
			return cli_usage_error("export", "--single-shard and --keep-shards exclude each "
			                                 "other: give one");
		if (!single_shard && !keep_shards)
			return cli_usage_error("export", "--format tf needs --single-shard (every variable "
			                                 "one tensor) or --keep-shards (sharded variables "
			                                 "as TensorFlow slices)");
	} else {
		if (keep_shards)
			return cli_usage_error("export", "--keep-shards applies to --format tf only");
		if (!single_shard)
			return cli_usage_error("export", "export writes every variable as one full tensor: "
			                                 "give --single-shard");
	}
	if (chunk_size && strcmp(format, "dvar") != 0)
		return cli_usage_error("export", "--chunk-size applies to --format dvar only");
	if ((rc = cli_check_chunk_size("export", chunk_size)) != 0)
		return rc;
	for (int k = 0; k < drop.n; k++)
		if (!drop.v[k][0])
			return cli_usage_error("export", "--drop-prefix '' would drop every variable");
	return 0;
}

/* Bytes of variable i written whole. */
static uint64_t full_bytes(const dvar_var_info *v)
{
	uint64_t n = 0;

	dvar_shape_num_bytes(&v->shape, v->dtype, &n);
	return n;
}

/* Bytes export copies of v: its saved slices with --keep-shards (or when it
 * is a string tensor, copied as stored), else all of it. */
static uint64_t export_bytes(const dvar_var_info *v)
{
	return keep_shards || v->dtype == DVAR_DTYPE_STRING ? v->raw_bytes : full_bytes(v);
}

/*
 * The variables of a TensorFlow IN that are not numeric: string tensors go
 * into a TensorFlow OUT, and are left out of the others with a note (as
 * reshard does); a dtype dvar has no type for is an error.
 */
static int check_dtypes(dvar_reader *r)
{
	dvar_var_info v;

	for (size_t i = 0; i < dvar_reader_num_vars(r); i++) {
		if (dvar_reader_var(r, i, &v) != DVAR_OK)
			return cli_error_dvar("export");
		if (dropped(v.name) || cli_dtype_numeric(v.dtype))
			continue;
		if (v.dtype != DVAR_DTYPE_STRING)
			return cli_error_dtype("export", v.name, v.dtype);
		if (!is_tf())
			fprintf(stderr, "dvar export: note: leaving out '%s', a string tensor (%s holds "
			                "numeric tensors only)\n", v.name,
			        strcmp(format, "dvar") == 0 ? "a dvar checkpoint" : "safetensors");
	}
	return CLI_EXIT_OK;
}

/* ------------------------------------------------------------------- dvar */

/* Variable i whole, as one slice, its attributes those of one shard. A cli_var_fn. */
static int export_var(void *ctx, cli_copier *c, dvar_reader *r, size_t i, const dvar_var_info *v,
                      dvar_writer *w)
{
	dvar_slice full;
	int rc;

	if (skipped(v))
		return CLI_EXIT_OK;
	dvar_slice_full(&full, &v->shape);
	rc = cli_copy_region(c, r, i, v, w, &full);
	if (rc == CLI_EXIT_OK &&
	    cli_copy_attrs(r, i, w, v->name, cli_var_is_sharded(r, i) ? 1 : 0) != DVAR_OK)
		rc = cli_error_dvar("export");
	return rc;
}

static int export_dvar(dvar_reader *r, uint64_t total)
{
	return cli_rewrite("export", r, out_path, chunk_size, DVAR_COMPRESS_NONE, progress, total,
	                   export_var, NULL);
}

/* ------------------------------------------------------------- safetensors */

static const char *st_dtype(int dtype)
{
	switch (dtype) {
	case DVAR_FLOAT32: return "F32";
	case DVAR_FLOAT64: return "F64";
	case DVAR_FLOAT16: return "F16";
	case DVAR_BFLOAT16: return "BF16";
	case DVAR_INT8: return "I8";
	case DVAR_INT16: return "I16";
	case DVAR_INT32: return "I32";
	case DVAR_INT64: return "I64";
	case DVAR_UINT8: return "U8";
	case DVAR_UINT16: return "U16";
	case DVAR_UINT32: return "U32";
	case DVAR_UINT64: return "U64";
	case DVAR_BOOL: return "BOOL";
	default: return NULL;
	}
}

/*
 * The header: JSON without a trailing newline, padded with spaces so that
 * the data starts at a multiple of 8 (8 + its length). *hdr is malloc'ed.
 */
static int st_header(dvar_reader *r, char **hdr, size_t *len)
{
	size_t mlen = 0;
	char *mem = NULL;
	FILE *f = open_memstream(&mem, &mlen);
	dvar_var_info v;
	uint64_t at = 0;
	cli_json j;

	if (!f)
		return cli_error("export", "out of memory");
	cli_json_begin_bare(&j, f);
	cli_json_object(&j, "__metadata__");
	cli_json_str(&j, "format", "pt");
	cli_json_end(&j);
	for (size_t i = 0; i < dvar_reader_num_vars(r); i++) {
		if (dvar_reader_var(r, i, &v) != DVAR_OK) {
			fclose(f);
			free(mem);
			return cli_error_dvar("export");
		}
		if (skipped(&v))
			continue;
		if (!cli_utf8_valid(v.name) || strcmp(v.name, "__metadata__") == 0) {
			fclose(f);
			free(mem);
			return cli_error("export", "variable '%s' cannot be named in a safetensors file "
			                           "(names must be UTF-8 and not __metadata__); leave it "
			                           "out with --drop-prefix", v.name);
		}
		uint64_t bytes = full_bytes(&v);
		cli_json_object(&j, v.name);
		cli_json_str(&j, "dtype", st_dtype(v.dtype));
		cli_json_dims(&j, "shape", v.shape.dims, v.shape.rank);
		cli_json_array(&j, "data_offsets");
		cli_json_u64(&j, NULL, at);
		cli_json_u64(&j, NULL, at + bytes);
		cli_json_end(&j);
		cli_json_end(&j);
		at += bytes;
	}
	cli_json_end(&j);
	if (fclose(f) != 0 || !mem) {
		free(mem);
		return cli_error("export", "out of memory");
	}
	/* cli_json ends the document with a newline: spaces pad instead. */
	if (mlen && mem[mlen - 1] == '\n')
		mlen--;
	size_t padded = (mlen + 7) / 8 * 8;
	char *p = realloc(mem, padded + 1);
	if (!p) {
		free(mem);
		return cli_error("export", "out of memory");
	}
	memset(p + mlen, ' ', padded - mlen);
	p[padded] = '\0';
	*hdr = p;
	*len = padded;
	return CLI_EXIT_OK;
}

static int to_file(void *ctx, const void *data, uint64_t bytes)
{
	FILE *f = ctx;

	if (fwrite(data, 1, (size_t)bytes, f) != bytes)
		return cli_error("export", "writing '%s' failed: %s", out_path, strerror(errno));
	return CLI_EXIT_OK;
}

/* Variable i whole into the file ctx. A cli_var_fn. */
static int st_var(void *ctx, cli_copier *c, dvar_reader *r, size_t i, const dvar_var_info *v,
                  dvar_writer *w)
{
	dvar_slice full;

	if (skipped(v))
		return CLI_EXIT_OK;
	dvar_slice_full(&full, &v->shape);
	return cli_copy_pieces(c, r, i, v->dtype, &full, to_file, ctx);
}

/* Header and tensors into f. */
static int st_write(dvar_reader *r, FILE *f, uint64_t total)
{
	char *hdr = NULL;
	size_t hlen = 0;
	int rc = st_header(r, &hdr, &hlen);

	if (rc != CLI_EXIT_OK)
		return rc;
	unsigned char n8[8];
	for (int b = 0; b < 8; b++)
		n8[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
	if (fwrite(n8, 1, 8, f) != 8 || fwrite(hdr, 1, hlen, f) != hlen)
		rc = cli_error("export", "writing '%s' failed: %s", out_path, strerror(errno));
	free(hdr);
	if (rc == CLI_EXIT_OK)
		rc = cli_each_var("export", r, NULL, progress, total, st_var, f);
	return rc;
}

/* ---------------------------------------------------------------------- tf */

static int to_tf(void *ctx, const void *data, uint64_t bytes)
{
	if (dvar_tf_writer_write(ctx, data, (size_t)bytes) != DVAR_OK)
		return cli_error_dvar("export");
	return CLI_EXIT_OK;
}

/* region of variable i as the tensor (or slice) v->name of the bundle. */
static int tf_region(cli_copier *c, dvar_reader *r, size_t i, const dvar_var_info *v,
                     dvar_tf_writer *w, const dvar_slice *region)
{
	if (dvar_tf_writer_begin(w, v->name, v->dtype, &v->shape, region) != DVAR_OK)
		return cli_error_dvar("export");
	int rc = cli_copy_pieces(c, r, i, v->dtype, region, to_tf, w);
	if (rc == CLI_EXIT_OK && dvar_tf_writer_end(w) != DVAR_OK)
		rc = cli_error_dvar("export");
	return rc;
}

/* String tensor i (of a TensorFlow IN), read whole, into the bundle as it was. */
static int tf_strings(cli_copier *c, dvar_reader *r, size_t i, const dvar_var_info *v,
                      dvar_tf_writer *w)
{
	uint64_t n = 0, total = 0, *lens = NULL;
	char *bytes = NULL;

	dvar_shape_num_elements(&v->shape, &n);
	int rc = cli_read_strings("export", r, i, n, &lens, &bytes, &total);
	if (rc != CLI_EXIT_OK)
		return rc;
	if (dvar_tf_writer_add_strings(w, v->name, &v->shape, lens, bytes) != DVAR_OK)
		rc = cli_error_dvar("export");
	free(lens);
	free(bytes);
	c->done += v->raw_bytes;
	if (c->pr)
		cli_progress_update(c->pr, c->done, c->total);
	return rc;
}

/*
 * Variable i into the bundle ctx. A cli_var_fn. --single-shard: one plain
 * entry. --keep-shards: each saved slice as a TensorFlow slice (one that
 * covers the variable is a plain entry); slices without elements carry
 * nothing and are left out (TensorFlow's slices have positive lengths),
 * and a variable without elements is one plain entry.
 */
static int tf_var(void *ctx, cli_copier *c, dvar_reader *r, size_t i, const dvar_var_info *v,
                  dvar_writer *unused)
{
	dvar_slice full, sl;
	uint64_t n = 0;

	(void)unused;
	if (skipped(v))
		return CLI_EXIT_OK;
	if (v->dtype == DVAR_DTYPE_STRING)
		return tf_strings(c, r, i, v, ctx);
	dvar_slice_full(&full, &v->shape);
	dvar_shape_num_elements(&v->shape, &n);
	if (!keep_shards || n == 0)
		return tf_region(c, r, i, v, ctx, &full);
	for (size_t j = 0; j < v->num_slices; j++) {
		if (dvar_reader_var_slice(r, i, j, &sl) != DVAR_OK)
			return cli_error_dvar("export");
		if (dvar_slice_num_elements(&sl, &n) != DVAR_OK)
			return cli_error_dvar("export");
		if (n == 0)
			continue;
		int rc = tf_region(c, r, i, v, ctx, &sl);
		if (rc != CLI_EXIT_OK)
			return rc;
	}
	return CLI_EXIT_OK;
}

static int export_tf(dvar_reader *r, uint64_t total)
{
	dvar_tf_writer *w = NULL;

	if (dvar_tf_writer_open(&w, out_path) != DVAR_OK)
		return cli_error_dvar("export");
	int rc = cli_each_var("export", r, NULL, progress, total, tf_var, w);
	if (rc == CLI_EXIT_OK && dvar_tf_writer_commit(w) != DVAR_OK)
		rc = cli_error_dvar("export");
	dvar_tf_writer_free(w);
	return rc;
}

/* OUT's own files must not exist either: a bundle is never replaced. */
static int check_tf_out(void)
{
	static const char *const suffixes[] = { ".index", ".data-00000-of-00001" };
	struct stat st;

	for (size_t k = 0; k < 2; k++) {
		size_t len = strlen(out_path) + strlen(suffixes[k]) + 1;
		char *p = malloc(len);
		if (!p)
			return cli_error("export", "out of memory");
		snprintf(p, len, "%s%s", out_path, suffixes[k]);
		int exists = lstat(p, &st) == 0;
		int rc = exists ? cli_error("export", "'%s' already exists; give a new prefix for OUT", p)
		                : CLI_EXIT_OK;
		free(p);
		if (rc != CLI_EXIT_OK)
			return rc;
	}
	return CLI_EXIT_OK;
}

/* Write OUT.tmp-XXXXXX, fsync it, then link it to OUT (never replacing anything). */
static int export_safetensors(dvar_reader *r, uint64_t total)
{
	size_t len = strlen(out_path) + 16;
	char *tmp = malloc(len);
	int rc;

	if (!tmp)
		return cli_error("export", "out of memory");
	snprintf(tmp, len, "%s.tmp-XXXXXX", out_path);
	int fd = mkstemp(tmp);
	FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
	if (!f) {
		rc = cli_error("export", "cannot create '%s': %s", out_path, strerror(errno));
		if (fd >= 0) {
			close(fd);
			unlink(tmp);
		}
		free(tmp);
		return rc;
	}
	rc = st_write(r, f, total);
	if (rc == CLI_EXIT_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
		rc = cli_error("export", "writing '%s' failed: %s", tmp, strerror(errno));
	if (fclose(f) != 0 && rc == CLI_EXIT_OK)
		rc = cli_error("export", "writing '%s' failed: %s", tmp, strerror(errno));
	if (rc == CLI_EXIT_OK) {
		/* mkstemp makes the file 0600; a new file gets 0666 less the umask. */
		mode_t mask = umask(0);
		umask(mask);
		struct stat st;
		int ok = chmod(tmp, 0666 & ~mask) == 0;
		if (ok && link(tmp, out_path) != 0) {
			/* File systems without hard links: rename, after a last look. */
			ok = (errno == EPERM || errno == ENOTSUP || errno == EOPNOTSUPP) &&
			     lstat(out_path, &st) != 0 && errno == ENOENT && rename(tmp, out_path) == 0;
			if (!ok && errno == ENOENT)
				errno = EEXIST;
		}
		if (!ok)
			rc = cli_error("export", "cannot create '%s': %s", out_path, strerror(errno));
	}
	unlink(tmp);
	free(tmp);
	return rc;
}

int cmd_export(int argc, char **argv)
{
	dvar_reader *r = NULL;
	dvar_var_info v;
	uint64_t total = 0;
	int rc = cli_parse(&usage, argc, argv);

	if (rc != CLI_CONTINUE)
		return rc;
	int tf = is_tf();
	if ((rc = check_options()) != 0 || (tf && (rc = check_tf_out()) != CLI_EXIT_OK) ||
	    (rc = cli_open_in_out("export", in_path, out_path, tf ? "prefix" : "path", &r)) !=
	        CLI_EXIT_OK)
		return rc;
	if ((rc = check_dtypes(r)) != CLI_EXIT_OK) {
		dvar_reader_free(r);
		return rc;
	}
	for (size_t i = 0; i < dvar_reader_num_vars(r); i++)
		if (dvar_reader_var(r, i, &v) == DVAR_OK && !skipped(&v))
			total += export_bytes(&v);
	if (strcmp(format, "dvar") == 0)
		rc = export_dvar(r, total);
	else if (tf)
		rc = export_tf(r, total);
	else
		rc = export_safetensors(r, total);
	dvar_reader_free(r);
	return rc;
}
