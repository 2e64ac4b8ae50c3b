/*
 * cli/cmd_cat.c - `dvar cat`: one variable, or any slice of it, as text on
 * stdout (numpy-like nested brackets) or as a .npy file. The variable is read
 * in bounded pieces, so its size does not bound memory.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

#define PRINT_LIMIT 10000
#define CONVERT_BATCH 4096

static const char *path;
static const char *var_name;
static const char *slice_spec;
static const char *npy_path;
static int force;
static int progress = -1;

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "PATH", NULL, &path, 0, CLI_OPT_REQUIRED,
	  "a checkpoint directory, or a root with a `checkpoint` file" },
	{ CLI_OPT_ARG, "NAME", NULL, &var_name, 0, CLI_OPT_REQUIRED, "the variable" },
	{ CLI_OPT_STRING, "slice", "SPEC", &slice_spec, 0, 0,
	  "only this slice, in TensorFlow's slice text: per dimension\n"
	  "\"start,length\" or \"-\" (all of it), joined by ':' (\"0,2:-\")" },
	{ CLI_OPT_STRING, "npy", "FILE", &npy_path, 0, 0,
	  "write a .npy file instead of text (FILE may be /dev/stdout)" },
	{ CLI_OPT_SWITCH, "force", NULL, &force, 1, 0,
	  "print more than 10000 elements as text" },
	CLI_PROGRESS_OPTS(&progress),
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"Text prints floats with the fewest digits that read back exactly. numpy\n"
	"has no bfloat16, so --npy writes a bfloat16 variable as float32 (exactly).\n"
	"A --slice that does not parse or lies outside the variable is a usage error.",
	NULL
};

/* Where the pieces of the variable go, in row-major order. */
typedef int (*piece_fn)(void *ctx, const void *data, uint64_t n);

/* Read slice sl of variable i piece by piece, handing each to fn. */
static int read_pieces(dvar_reader *r, size_t i, int dtype, const dvar_slice *sl,
                       piece_fn fn, void *ctx)
{
	size_t esize = dvar_dtype_size(dtype);
	uint64_t budget = cli_walk_budget(esize), total, done = 0, n;
	dvar_slice piece;
	cli_walk w;
	cli_progress pr;
	int rc = CLI_EXIT_OK;

	dvar_slice_num_elements(sl, &total);
	void *buf = malloc((size_t)(total < budget ? total : budget) * esize + 1);
	if (!buf)
		return cli_error("cat", "out of memory");
	cli_progress_init(&pr, "cat", progress, 0);
	cli_walk_init(&w, sl, budget);
	while (rc == CLI_EXIT_OK && cli_walk_next(&w, &piece, &n)) {
		if (dvar_reader_read(r, i, &piece, buf, n * esize) != DVAR_OK)
			rc = cli_error_dvar("cat");
		else
			rc = fn(ctx, buf, n);
		done += n;
		cli_progress_update(&pr, done * esize, total * esize);
	}
	cli_progress_end(&pr);
	free(buf);
	return rc;
}

/* ---------------------------------------------------------------- text */

typedef struct {
	int dtype;
	int rank;
	uint64_t block[DVAR_MAX_RANK]; /* elements under one index of each dim */
	uint64_t next;                 /* flat index of the next element */
} text_out;

/* How many dims start a new block at flat index e (the brackets to open). */
static int blocks_at(const text_out *t, uint64_t e)
{
	int k = 0;

	while (k < t->rank && e % t->block[t->rank - 1 - k] == 0)
		k++;
	return k;
}

static int print_piece(void *ctx, const void *data, uint64_t n)
{
	text_out *t = ctx;
	size_t esize = dvar_dtype_size(t->dtype);
	char buf[48];

	for (uint64_t i = 0; i < n; i++, t->next++) {
		int k = blocks_at(t, t->next);
		if (t->next == 0) {
			printf("%.*s", k, "[[[[[[[[");
		} else if (k == 0) {
			fputs(", ", stdout);
		} else {
			/* Close k blocks, a blank line per closed level beyond the first. */
			printf("%.*s,\n%.*s%*s%.*s", k, "]]]]]]]]", k - 1, "\n\n\n\n\n\n\n",
			       t->rank - k, "", k, "[[[[[[[[");
		}
		cli_format_elem(buf, sizeof(buf), t->dtype, (const char *)data + i * esize);
		fputs(buf, stdout);
	}
	return CLI_EXIT_OK;
}

static int print_text(dvar_reader *r, size_t i, int dtype, const dvar_slice *sl, uint64_t n)
{
	text_out t = { dtype, sl->rank, { 0 }, 0 };

	if (n > PRINT_LIMIT && !force)
		return cli_usage_error("cat", "'%s' has %llu elements; printing more than %d needs "
		                              "--force (or use --slice or --npy)",
		                       var_name, (unsigned long long)n, PRINT_LIMIT);
	if (n == 0) {
		puts("[]");
		return CLI_EXIT_OK;
	}
	uint64_t block = 1;
	for (int d = sl->rank - 1; d >= 0; d--) {
		block *= (uint64_t)sl->length[d];
		t.block[d] = block;
	}
	int rc = read_pieces(r, i, dtype, sl, print_piece, &t);
	if (rc == CLI_EXIT_OK)
		printf("%.*s\n", sl->rank, "]]]]]]]]");
	return rc;
}

/* ----------------------------------------------------------------- npy */

typedef struct {
	FILE *f;
	int dtype;
} npy_out;

static int write_piece(void *ctx, const void *data, uint64_t n)
{
	npy_out *o = ctx;
	size_t esize = dvar_dtype_size(o->dtype);

	if (o->dtype != DVAR_BFLOAT16) {
		if (fwrite(data, esize, (size_t)n, o->f) != n)
			return cli_error("cat", "writing '%s' failed", npy_path);
		return CLI_EXIT_OK;
	}
	/* Widened through double, which holds every bfloat16 and float exactly. */
	double d[CONVERT_BATCH];
	float f[CONVERT_BATCH];
	for (uint64_t at = 0; at < n; at += CONVERT_BATCH) {
		size_t m = n - at < CONVERT_BATCH ? (size_t)(n - at) : CONVERT_BATCH;
		dvar_dtype_to_f64(d, o->dtype, (const char *)data + at * esize, m);
		for (size_t k = 0; k < m; k++)
			f[k] = (float)d[k];
		if (fwrite(f, sizeof(float), m, o->f) != m)
			return cli_error("cat", "writing '%s' failed", npy_path);
	}
	return CLI_EXIT_OK;
}

/*
 * The output: a new or regular file is written to a temporary sibling,
 * renamed at the end, so a failure leaves no partial file; anything else
 * (a device, a pipe, a symlink such as /dev/stdout) is written in place,
 * as renaming over it would replace it. *tmp is NULL in the second case.
 */
static FILE *open_output(char **tmp)
{
	struct stat st;

	*tmp = NULL;
	if (lstat(npy_path, &st) == 0 && !S_ISREG(st.st_mode))
		return fopen(npy_path, "wb");
	size_t len = strlen(npy_path) + 16;
	if (!(*tmp = malloc(len)))
		return NULL;
	snprintf(*tmp, len, "%s.tmp-XXXXXX", npy_path);
	int fd = mkstemp(*tmp);
	FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
	if (!f) {
		int err = errno;
		if (fd >= 0) {
			close(fd);
			unlink(*tmp);
		}
		free(*tmp);
		*tmp = NULL;
		errno = err;
	}
	return f;
}

/* Give the temporary file its final name and the mode a new file gets. */
static int commit_output(const char *tmp)
{
	/* mkstemp makes the file 0600. */
	mode_t mask = umask(0);
	umask(mask);
	if (chmod(tmp, 0666 & ~mask) != 0 || rename(tmp, npy_path) != 0)
		return cli_error("cat", "cannot create '%s': %s", npy_path, strerror(errno));
	return CLI_EXIT_OK;
}

static int write_npy(dvar_reader *r, size_t i, int dtype, const dvar_slice *sl)
{
	const char *descr = cli_npy_descr(dtype == DVAR_BFLOAT16 ? DVAR_FLOAT32 : dtype);
	dvar_shape shape;
	char *tmp;
	int rc;

	npy_out o = { open_output(&tmp), dtype };
	if (!o.f)
		return cli_error("cat", "cannot create '%s': %s", npy_path, strerror(errno));
	if (dtype == DVAR_BFLOAT16)
		fprintf(stderr, "dvar cat: note: '%s' is bfloat16, which numpy lacks; "
		                "writing it as float32 (exact)\n", var_name);
	dvar_slice_shape(sl, &shape);
	if (cli_npy_write_header(o.f, descr, &shape) != 0)
		rc = cli_error("cat", "writing '%s' failed", npy_path);
	else
		rc = read_pieces(r, i, dtype, sl, write_piece, &o);
	if (fclose(o.f) != 0 && rc == CLI_EXIT_OK)
		rc = cli_error("cat", "writing '%s' failed: %s", npy_path, strerror(errno));
	if (tmp && rc == CLI_EXIT_OK)
		rc = commit_output(tmp);
	if (tmp && rc != CLI_EXIT_OK)
		unlink(tmp);
	free(tmp);
	return rc;
}

int cmd_cat(int argc, char **argv)
{
	dvar_reader *r = NULL;
	dvar_var_info v;
	dvar_slice sl;
	uint64_t n;
	size_t i;
	int rc = cli_parse(&usage, argc, argv);

	if (rc != CLI_CONTINUE)
		return rc;
	if (dvar_reader_open(&r, path, NULL) != DVAR_OK)
		return cli_error_dvar("cat");
	if (dvar_reader_find(r, var_name, &i) != DVAR_OK || dvar_reader_var(r, i, &v) != DVAR_OK) {
		rc = cli_error_dvar("cat");
		goto done;
	}
	if (slice_spec) {
		if (dvar_slice_parse(&sl, slice_spec, &v.shape) != DVAR_OK) {
			rc = cli_usage_error("cat", "--slice '%s': %s", slice_spec, cli_dvar_message());
			goto done;
		}
	} else {
		dvar_slice_full(&sl, &v.shape);
	}
	if (dvar_slice_num_elements(&sl, &n) != DVAR_OK) {
		rc = cli_error_dvar("cat");
		goto done;
	}
	rc = npy_path ? write_npy(r, i, v.dtype, &sl) : print_text(r, i, v.dtype, &sl, n);
done:
	dvar_reader_free(r);
	return rc;
}
