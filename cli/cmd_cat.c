/*
 * cli/cmd_cat.c - `dvar cat`: one variable, or any slice of it, as text on
 * stdout (numpy-like nested brackets), as JSON, as a .npy file or as raw
 * bytes. A numeric variable is read in bounded pieces, so its size does not
 * bound memory; a TensorFlow string tensor is read whole and printed one
 * C-escaped element per line.
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
static const char *raw_path;
static int json;
static int force;
static int short_names;
static int progress = -1;

/* The file --npy or --raw writes ("-": stdout), and how messages name it. */
static const char *out_path;
static char out_shown[512];

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "PATH", NULL, &path, 0, CLI_OPT_REQUIRED,
	  "a checkpoint directory, a root with a `checkpoint` file, or a\n"
	  "TensorFlow checkpoint (its prefix, or a directory naming it)" },
	{ CLI_OPT_ARG, "NAME", NULL, &var_name, 0, CLI_OPT_REQUIRED,
	  "the variable (with --short-names, its short name will do)" },
	{ CLI_OPT_STRING, "slice", "SPEC", &slice_spec, 0, 0,
	  "only this slice: TensorFlow's text, per dimension \"start,length\"\n"
	  "or \"-\" (all of it) joined by ':' (\"0,2:-\"), or NumPy's, per\n"
	  "dimension \"start:stop\", \":\" or an index joined by ',', the\n"
	  "dimensions left out whole (\"5:7\" is rows 5 and 6 of a table);\n"
	  "see below" },
	{ CLI_OPT_STRING, "npy", "FILE", &npy_path, 0, 0,
	  "write a .npy file instead of text (FILE - is stdout)" },
	{ CLI_OPT_STRING, "raw", "FILE", &raw_path, 0, 0,
	  "write the bare bytes instead (FILE - is stdout): the\n"
	  "elements row-major, little-endian; a string tensor's elements\n"
	  "one after the other, without their lengths" },
	{ CLI_OPT_SWITCH, "json", NULL, &json, 1, 0, "print one JSON document on stdout" },
	{ CLI_OPT_SWITCH, "force", NULL, &force, 1, 0,
	  "replace an existing --npy/--raw FILE; print more than 10000\n"
	  "elements as text or JSON" },
	{ CLI_OPT_SWITCH, "short-names", NULL, &short_names, 1, 0,
	  "show the variable by its TF2 short name in --json (NAME may be\n"
	  "a short name that names one variable either way; see\n"
	  "'dvar help inspect')" },
	CLI_PROGRESS_OPTS(&progress),
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"Text prints floats with the fewest digits that read back exactly. numpy\n"
	"has no bfloat16, so --npy writes a bfloat16 variable as float32 (exactly).\n"
	"A --slice that does not parse or lies outside the variable is a usage error.\n"
	"It is TensorFlow's text when every ':'-separated part is \"-\" or holds one\n"
	"',' and no '-' (\"0,2:-\", \"1,2\"), NumPy's otherwise (\"1:3\", \"0:2,:\", \"7\",\n"
	"\"-1,-1\"): write \"1:2,2:3\" for NumPy's [1,2]. Negative numbers count from\n"
	"the end; an index keeps its dimension (length 1); a bound outside the\n"
	"dimension is an error, not clipped; steps are refused.\n"
	"A --slice of a TensorFlow tensor reads only its own bytes, which the\n"
	"tensor's one checksum (over all of it) cannot check; reading it whole,\n"
	"or 'dvar verify', checks it.\n"
	"A TensorFlow string tensor prints one element per line, in double quotes\n"
	"with C escapes (printable ASCII as it is but for \\\" and \\\\; \\n, \\r, \\t;\n"
	"any other byte \\xNN), after its index in the variable (\"[2] \", \"[0,1] \";\n"
	"none for a scalar). --npy refuses strings; --raw writes their bytes.\n"
	"An existing --npy or --raw FILE is refused without --force; the file is\n"
	"written under a temporary name and renamed at the end, so a failure or\n"
	"Ctrl-C leaves the old one (or none). A device, pipe or symlink such as\n"
	"/dev/stdout is written in place.\n"
	"--json prints {\"schema_version\":1,\"path\",\"name\",\"dtype\",\"shape\",\n"
	"\"slice\":{\"start\",\"length\"} (with --slice),\"values\"}: values nested as the\n"
	"slice's shape (a scalar bare); numbers as text prints them, bool as\n"
	"true/false, NaN and infinities as the strings \"nan\", \"inf\", \"-inf\"; a\n"
	"string element as a JSON string when it is valid UTF-8, else as\n"
	"{\"base64\":\"...\"}. With --short-names, \"name\" is the short name and\n"
	"\"full_name\" the key.",
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
	dvar_slice_walk w;
	cli_progress pr;
	int rc = CLI_EXIT_OK;

	dvar_slice_num_elements(sl, &total);
	void *buf = malloc((size_t)(total < budget ? total : budget) * esize + 1);
	if (!buf)
		return cli_error("cat", "out of memory");
	cli_progress_init(&pr, "cat", progress, json);
	dvar_slice_walk_init(&w, sl, budget);
	while (rc == CLI_EXIT_OK && dvar_slice_walk_next(&w, &piece, &n)) {
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
	cli_json *j;                   /* --json: the document the values go into */
} text_out;

static void init_blocks(text_out *t, const dvar_slice *sl)
{
	uint64_t block = 1;

	t->rank = sl->rank;
	for (int d = sl->rank - 1; d >= 0; d--) {
		block *= (uint64_t)sl->length[d];
		t->block[d] = block;
	}
}

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

/* Text and --json print at most PRINT_LIMIT elements unless --force; file names
 * the file output that suits the variable. */
static int check_print_limit(uint64_t n, const char *file)
{
	if (n > PRINT_LIMIT && !force)
		return cli_usage_error("cat", "'%s' has %llu elements; printing more than %d needs "
		                              "--force (or use --slice or %s)",
		                       var_name, (unsigned long long)n, PRINT_LIMIT, file);
	return CLI_EXIT_OK;
}

static int print_text(dvar_reader *r, size_t i, int dtype, const dvar_slice *sl, uint64_t n)
{
	text_out t = { dtype, sl->rank, { 0 }, 0, NULL };
	int rc = check_print_limit(n, "--npy");

	if (rc != CLI_EXIT_OK)
		return rc;
	if (n == 0) {
		puts("[]");
		return CLI_EXIT_OK;
	}
	init_blocks(&t, sl);
	rc = read_pieces(r, i, dtype, sl, print_piece, &t);
	if (rc == CLI_EXIT_OK)
		printf("%.*s\n", sl->rank, "]]]]]]]]");
	return rc;
}

/* ---------------------------------------------------------------- JSON */

/* Before element number t->next of a --json array: close and open the brackets. */
static void json_brackets(text_out *t)
{
	int k = blocks_at(t, t->next);

	if (t->next == 0)
		k = t->rank;
	else
		for (int c = 0; c < k; c++)
			cli_json_end(t->j);
	for (int c = 0; c < k; c++)
		cli_json_array(t->j, t->next == 0 && c == 0 ? "values" : NULL);
}

/* One element as a JSON value: numbers as text prints them. */
static void json_elem(cli_json *j, const char *key, int dtype, const void *p)
{
	char buf[48];

	cli_format_elem(buf, sizeof(buf), dtype, p);
	if (dtype == DVAR_BOOL)
		cli_json_bool(j, key, strcmp(buf, "True") == 0);
	else if (strcmp(buf, "nan") == 0 || strcmp(buf, "inf") == 0 || strcmp(buf, "-inf") == 0)
		cli_json_str(j, key, buf);
	else
		cli_json_raw(j, key, buf);
}

static int json_piece(void *ctx, const void *data, uint64_t n)
{
	text_out *t = ctx;
	size_t esize = dvar_dtype_size(t->dtype);

	for (uint64_t i = 0; i < n; i++, t->next++) {
		if (t->rank == 0) {
			json_elem(t->j, "values", t->dtype, (const char *)data + i * esize);
			continue;
		}
		json_brackets(t);
		json_elem(t->j, NULL, t->dtype, (const char *)data + i * esize);
	}
	return CLI_EXIT_OK;
}

/* The nested empty arrays of a slice without elements, from dimension d on. */
static void json_empty(cli_json *j, const char *key, const dvar_slice *sl, int d)
{
	cli_json_array(j, key);
	if (sl->length[d] > 0 && d + 1 < sl->rank)
		for (int64_t k = 0; k < sl->length[d]; k++)
			json_empty(j, NULL, sl, d + 1);
	cli_json_end(j);
}

/* The document's fields before "values". */
static void json_head(cli_json *j, dvar_reader *r, const dvar_var_info *v, const dvar_slice *sl)
{
	char dtype[CLI_DTYPE_TEXT_MAX];
	char *shown = short_names ? dvar_short_name(v->name) : NULL;

	cli_json_begin(j, stdout);
	cli_json_str(j, "path", dvar_reader_path(r));
	cli_json_str(j, "name", shown ? shown : v->name);
	if (short_names)
		cli_json_str(j, "full_name", v->name);
	dvar_free(shown);
	cli_json_str(j, "dtype", cli_dtype_text(v->dtype, dtype, sizeof(dtype)));
	cli_json_dims(j, "shape", v->shape.dims, v->shape.rank);
	if (slice_spec) {
		cli_json_object(j, "slice");
		cli_json_dims(j, "start", sl->start, sl->rank);
		cli_json_dims(j, "length", sl->length, sl->rank);
		cli_json_end(j);
	}
}

/* Product of the dims before the first empty one: the [] a JSON empty slice prints. */
static uint64_t empty_arrays(const dvar_slice *sl)
{
	uint64_t n = 1;

	for (int d = 0; d < sl->rank && sl->length[d] > 0 && n <= PRINT_LIMIT; d++)
		n *= (uint64_t)sl->length[d];
	return n;
}

static int print_json(dvar_reader *r, size_t i, const dvar_var_info *v, const dvar_slice *sl,
                      uint64_t n)
{
	cli_json j;
	text_out t = { v->dtype, sl->rank, { 0 }, 0, &j };
	int rc = check_print_limit(n ? n : empty_arrays(sl), "--npy");

	if (rc != CLI_EXIT_OK)
		return rc;
	json_head(&j, r, v, sl);
	if (n == 0) {
		json_empty(&j, "values", sl, 0);
	} else {
		init_blocks(&t, sl);
		rc = read_pieces(r, i, v->dtype, sl, json_piece, &t);
	}
	/* After a failed read these are dropped: reporting it ended the document. */
	while (j.depth > 0)
		cli_json_end(&j);
	return rc;
}

/* ------------------------------------------------------------ npy, raw */

typedef struct {
	FILE *f;
	int dtype;
	int widen; /* bfloat16 to float32, for .npy */
} file_out;

static int write_piece(void *ctx, const void *data, uint64_t n)
{
	file_out *o = ctx;
	size_t esize = dvar_dtype_size(o->dtype);

	if (!o->widen) {
		if (fwrite(data, esize, (size_t)n, o->f) != n)
			return cli_error("cat", "writing %s failed: %s", out_shown, strerror(errno));
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
			return cli_error("cat", "writing %s failed: %s", out_shown, strerror(errno));
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
	if (strcmp(out_path, "-") == 0)
		return stdout;
	if (lstat(out_path, &st) == 0 && !S_ISREG(st.st_mode))
		return fopen(out_path, "wb");
	size_t len = strlen(out_path) + 16;
	if (!(*tmp = malloc(len)))
		return NULL;
	snprintf(*tmp, len, "%s.tmp-XXXXXX", out_path);
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
	if (chmod(tmp, 0666 & ~mask) != 0 || rename(tmp, out_path) != 0)
		return cli_error("cat", "cannot create %s: %s", out_shown, strerror(errno));
	return CLI_EXIT_OK;
}

/* Close the output; on success give it its name, on failure remove it. */
static int finish_output(FILE *f, char *tmp, int rc)
{
	/* stdout stays open: main checks it once more at exit. */
	if ((f == stdout ? fflush(f) : fclose(f)) != 0 && rc == CLI_EXIT_OK)
		rc = cli_error("cat", "writing %s failed: %s", out_shown, strerror(errno));
	if (tmp && rc == CLI_EXIT_OK)
		rc = commit_output(tmp);
	if (tmp && rc != CLI_EXIT_OK)
		unlink(tmp);
	free(tmp);
	return rc;
}

/* --npy (npy set) or --raw. */
static int write_file(dvar_reader *r, size_t i, int dtype, const dvar_slice *sl, int npy)
{
	char hdr[DVAR_NPY_HEADER_MAX];
	size_t hlen = 0;
	dvar_shape shape;
	char *tmp;
	int rc = CLI_EXIT_OK;

	file_out o = { open_output(&tmp), dtype, npy && dtype == DVAR_BFLOAT16 };
	if (!o.f)
		return cli_error("cat", "cannot create %s: %s", out_shown, strerror(errno));
	if (o.widen)
		fprintf(stderr, "dvar cat: note: '%s' is bfloat16, which numpy lacks; "
		                "writing it as float32 (exact)\n", var_name);
	dvar_slice_shape(sl, &shape);
	if (npy && dvar_npy_header(hdr, sizeof(hdr), &hlen, o.widen ? DVAR_FLOAT32 : dtype,
	                           &shape) != DVAR_OK)
		rc = cli_error_dvar("cat");
	else if (npy && fwrite(hdr, 1, hlen, o.f) != hlen)
		rc = cli_error("cat", "writing %s failed: %s", out_shown, strerror(errno));
	if (rc == CLI_EXIT_OK)
		rc = read_pieces(r, i, dtype, sl, write_piece, &o);
	return finish_output(o.f, tmp, rc);
}

/* ------------------------------------------------------------- strings */

/* The elements of slice sl of a variable of shape, in row-major order: flat indices. */
typedef struct {
	const dvar_slice *sl;
	uint64_t stride[DVAR_MAX_RANK];
	int64_t idx[DVAR_MAX_RANK]; /* offsets into sl of the next element */
} elem_walk;

static void elem_walk_init(elem_walk *w, const dvar_slice *sl, const dvar_shape *shape)
{
	uint64_t stride = 1;

	w->sl = sl;
	for (int d = shape->rank - 1; d >= 0; d--) {
		w->stride[d] = stride;
		stride *= (uint64_t)shape->dims[d];
		w->idx[d] = 0;
	}
}

/* The flat index of the next element, then advance. */
static uint64_t elem_walk_next(elem_walk *w)
{
	uint64_t flat = 0;

	for (int d = 0; d < w->sl->rank; d++)
		flat += (uint64_t)(w->sl->start[d] + w->idx[d]) * w->stride[d];
	for (int d = w->sl->rank - 1; d >= 0; d--) {
		if (++w->idx[d] < w->sl->length[d])
			break;
		w->idx[d] = 0;
	}
	return flat;
}

/* "[i,j] ": the index in the variable of the element at flat index flat. */
static void print_index(const elem_walk *w, uint64_t flat, const dvar_shape *shape)
{
	putchar('[');
	for (int d = 0; d < shape->rank; d++) {
		printf("%s%llu", d ? "," : "", (unsigned long long)(flat / w->stride[d]));
		flat %= w->stride[d];
	}
	fputs("] ", stdout);
}

static int cat_strings(dvar_reader *r, size_t i, const dvar_var_info *v, const dvar_slice *sl,
                       uint64_t n)
{
	uint64_t all, total, *lens = NULL, *at = NULL;
	char *bytes = NULL, *tmp = NULL;
	elem_walk w;
	int rc;

	if (npy_path)
		return cli_usage_error("cat", "'%s' is a string tensor, which a .npy file cannot hold "
		                              "exactly: print it, or use --json or --raw FILE", var_name);
	rc = raw_path ? CLI_EXIT_OK : check_print_limit(n || !json ? n : empty_arrays(sl), "--raw");
	if (rc != CLI_EXIT_OK)
		return rc;
	dvar_shape_num_elements(&v->shape, &all);
	if (dvar_reader_read_strings_alloc(r, i, &lens, &bytes, &total) != DVAR_OK)
		return cli_error_dvar("cat");
	/* Where each element starts in bytes. */
	if (!(at = malloc((size_t)(all ? all : 1) * sizeof(uint64_t)))) {
		rc = cli_error("cat", "out of memory");
		goto done;
	}
	for (uint64_t k = 0, off = 0; k < all; off += lens[k], k++)
		at[k] = off;
	elem_walk_init(&w, sl, &v->shape);
	if (raw_path) {
		FILE *f = open_output(&tmp);
		if (!f) {
			rc = cli_error("cat", "cannot create %s: %s", out_shown, strerror(errno));
			goto done;
		}
		for (uint64_t k = 0; k < n && rc == CLI_EXIT_OK; k++) {
			uint64_t e = elem_walk_next(&w);
			if (fwrite(bytes + at[e], 1, (size_t)lens[e], f) != lens[e])
				rc = cli_error("cat", "writing %s failed: %s", out_shown, strerror(errno));
		}
		rc = finish_output(f, tmp, rc);
	} else if (json) {
		cli_json j;
		text_out t = { v->dtype, sl->rank, { 0 }, 0, &j };
		json_head(&j, r, v, sl);
		if (n == 0) {
			json_empty(&j, "values", sl, 0);
		} else if (sl->rank == 0) {
			cli_json_bytes(&j, "values", bytes, lens[0]);
		} else {
			init_blocks(&t, sl);
			for (; t.next < n; t.next++) {
				json_brackets(&t);
				uint64_t e = elem_walk_next(&w);
				cli_json_bytes(&j, NULL, bytes + at[e], lens[e]);
			}
			while (j.depth > 1)
				cli_json_end(&j);
		}
		cli_json_end(&j);
	} else {
		for (uint64_t k = 0; k < n; k++) {
			uint64_t e = elem_walk_next(&w);
			if (v->shape.rank)
				print_index(&w, e, &v->shape);
			cli_print_cstring(stdout, bytes + at[e], lens[e]);
			putchar('\n');
		}
	}
done:
	dvar_free(lens);
	dvar_free(bytes);
	free(at);
	return rc;
}

/* ----------------------------------------------------------------- main */

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
	if (!!npy_path + !!raw_path + json > 1)
		return cli_usage_error("cat", "--npy, --raw and --json are different outputs: "
		                              "give one of them");
	out_path = npy_path ? npy_path : raw_path;
	if (out_path) {
		struct stat st;
		if (strcmp(out_path, "-") == 0)
			snprintf(out_shown, sizeof(out_shown), "stdout");
		else
			snprintf(out_shown, sizeof(out_shown), "'%s'", out_path);
		/* Checked before the read, which may be long; a device or symlink is written in place. */
		if (strcmp(out_path, "-") != 0 && !force && lstat(out_path, &st) == 0 &&
		    S_ISREG(st.st_mode))
			return cli_error("cat", "'%s' already exists; give a new FILE, or --force to "
			                        "replace it", out_path);
	}
	if (dvar_reader_open(&r, path, NULL) != DVAR_OK)
		return cli_error_dvar("cat");
	if ((rc = cli_find_var("cat", r, var_name, &i)) != CLI_EXIT_OK)
		goto done;
	if (dvar_reader_var(r, i, &v) != DVAR_OK) {
		rc = cli_error_dvar("cat");
		goto done;
	}
	if (slice_spec) {
		if (dvar_slice_parse_any(&sl, slice_spec, &v.shape) != DVAR_OK) {
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
	if (v.dtype == DVAR_DTYPE_STRING)
		rc = cat_strings(r, i, &v, &sl, n);
	else if (!cli_dtype_numeric(v.dtype))
		rc = cli_error_dtype("cat", v.name, v.dtype);
	else if (out_path)
		rc = write_file(r, i, v.dtype, &sl, npy_path != NULL);
	else if (json)
		rc = print_json(r, i, &v, &sl, n);
	else
		rc = print_text(r, i, v.dtype, &sl, n);
done:
	dvar_reader_free(r);
	return rc;
}
