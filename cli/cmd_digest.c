/*
 * cli/cmd_digest.c - `dvar digest`: each variable's logical digest, the
 * CRC-32C of its elements row-major as one tensor (dvar_reader_digest): the
 * same for a checkpoint, its reshards and its exports. One line per
 * variable, or one JSON document; string tensors get "-" and a note.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *path;
static cli_args names;
static int json;
static int short_names;

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "PATH", NULL, &path, 0, CLI_OPT_REQUIRED,
	  "a checkpoint directory, a root with a `checkpoint` file, or a\n"
	  "TensorFlow checkpoint (its prefix, or a directory naming it)" },
	{ CLI_OPT_ARGS, "NAME", NULL, &names, 0, 0,
	  "the variables to digest, in this order (default: all of them, in\n"
	  "name order)" },
	{ CLI_OPT_SWITCH, "json", NULL, &json, 1, 0, "print one JSON document on stdout" },
	{ CLI_OPT_SWITCH, "short-names", NULL, &short_names, 1, 0,
	  "show variables by their TF2 short names, and accept those as NAME\n"
	  "(see 'dvar help inspect')" },
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"Each line is NAME DTYPE SHAPE CRC32C: the CRC-32C (Castagnoli) of the\n"
	"variable's elements, row-major and little-endian, as one tensor, in 8\n"
	"hex digits. It does not depend on how the variable is sharded, chunked or\n"
	"compressed: a checkpoint, its reshards and its exports have the same\n"
	"digests ('dvar verify --against' compares them). Where the saved slices\n"
	"lie in row order it is combined from the chunks' checksums without\n"
	"reading data; otherwise, and for TensorFlow checkpoints, the values are\n"
	"read. String tensors have no digest: \"-\", with a note on stderr.\n"
	"--json prints {\"schema_version\":1,\"path\",\"variables\":[{\"name\",\"dtype\",\n"
	"\"shape\",\"crc32c\"}]}; crc32c is null where the line has \"-\"; with\n"
	"--short-names each variable also has \"full_name\".",
	NULL
};

/* One output line, formatted. */
typedef struct {
	const char *name;  /* as shown: the short name with --short-names */
	char *short_name;  /* --short-names: dvar_short_name's, for dvar_free */
	const char *full_name;
	dvar_shape shape;
	char dtype[CLI_DTYPE_TEXT_MAX], shape_text[200], crc[9];
	int has_crc;
} row;

static int fill_row(dvar_reader *r, size_t i, row *x)
{
	dvar_var_info v;
	uint32_t crc;

	if (dvar_reader_var(r, i, &v) != DVAR_OK)
		return cli_error_dvar("digest");
	x->full_name = x->name = v.name;
	if (short_names) {
		if (!(x->short_name = dvar_short_name(v.name)))
			return cli_error("digest", "out of memory");
		x->name = x->short_name;
	}
	x->shape = v.shape;
	cli_dtype_text(v.dtype, x->dtype, sizeof(x->dtype));
	dvar_shape_format(&v.shape, x->shape_text, sizeof(x->shape_text));
	if (!cli_dtype_numeric(v.dtype)) {
		/* A TF checkpoint's object graph is a string tensor: say so, go on. */
		fprintf(stderr, "dvar digest: note: variable '%s' %s %s: no digest\n", x->name,
		        v.dtype == DVAR_DTYPE_STRING ? "is a" : "has", v.dtype == DVAR_DTYPE_STRING ?
		        "string tensor" : x->dtype);
		snprintf(x->crc, sizeof(x->crc), "-");
		return CLI_EXIT_OK;
	}
	if (dvar_reader_digest(r, i, &crc) != DVAR_OK)
		return cli_error_dvar("digest");
	snprintf(x->crc, sizeof(x->crc), "%08x", crc);
	x->has_crc = 1;
	return CLI_EXIT_OK;
}

static void print_json(dvar_reader *r, const row *rows, size_t n)
{
	cli_json j;

	cli_json_begin(&j, stdout);
	cli_json_str(&j, "path", dvar_reader_path(r));
	cli_json_array(&j, "variables");
	for (size_t k = 0; k < n; k++) {
		const row *x = &rows[k];
		cli_json_object(&j, NULL);
		cli_json_str(&j, "name", x->name);
		if (short_names)
			cli_json_str(&j, "full_name", x->full_name);
		cli_json_str(&j, "dtype", x->dtype);
		cli_json_dims(&j, "shape", x->shape.dims, x->shape.rank);
		cli_json_str(&j, "crc32c", x->has_crc ? x->crc : NULL);
		cli_json_end(&j);
	}
	cli_json_end(&j);
	cli_json_end(&j);
}

static void print_lines(const row *rows, size_t n)
{
	int w[3] = { 0, 0, 0 };

	for (size_t k = 0; k < n; k++) {
		const char *cells[3] = { rows[k].name, rows[k].dtype, rows[k].shape_text };
		for (int c = 0; c < 3; c++)
			if ((int)strlen(cells[c]) > w[c])
				w[c] = (int)strlen(cells[c]);
	}
	for (size_t k = 0; k < n; k++)
		printf("%-*s  %-*s  %-*s  %s\n", w[0], rows[k].name, w[1], rows[k].dtype, w[2],
		       rows[k].shape_text, rows[k].crc);
}

int cmd_digest(int argc, char **argv)
{
	dvar_reader *r = NULL;
	row *rows = NULL;
	size_t n = 0, i;
	int rc = cli_parse(&usage, argc, argv);

	if (rc != CLI_CONTINUE)
		return rc;
	if (dvar_reader_open(&r, path, NULL) != DVAR_OK)
		return cli_error_dvar("digest");
	size_t want = names.n ? (size_t)names.n : dvar_reader_num_vars(r);
	if (!(rows = calloc(want ? want : 1, sizeof(*rows)))) {
		rc = cli_error("digest", "out of memory");
		goto done;
	}
	/* Every digest first: an error leaves stdout empty rather than half a table. */
	for (rc = CLI_EXIT_OK; n < want && rc == CLI_EXIT_OK; n++) {
		i = n;
		if (names.n)
			rc = cli_find_var("digest", r, names.v[n], &i);
		if (rc == CLI_EXIT_OK)
			rc = fill_row(r, i, &rows[n]);
	}
	if (rc == CLI_EXIT_OK) {
		if (json)
			print_json(r, rows, n);
		else
			print_lines(rows, n);
	}
done:
	for (size_t k = 0; rows && k < n; k++)
		dvar_free(rows[k].short_name);
	free(rows);
	dvar_reader_free(r);
	return rc;
}
