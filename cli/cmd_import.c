/*
 * cli/cmd_import.c - `dvar import`: build a committed checkpoint from .npy
 * files. Every file is mapped and checked before anything is written, and
 * the mapped bytes go to the writer as they are (no copy). The library
 * writes into a temporary directory and renames it at commit, so a failure
 * leaves nothing at OUT.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static const char *out_path;
static cli_args pairs;
static int no_compress;
static const char *compress = "auto";
static uint64_t chunk_size;
static int64_t step = -1;
static int64_t keep = -1;
static cli_args shard_opts;
static int progress = -1;

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "OUT", NULL, &out_path, 0, CLI_OPT_REQUIRED,
	  "the checkpoint directory to create (with --step, a checkpoint root)" },
	{ CLI_OPT_ARGS, "NAME=FILE.npy", NULL, &pairs, 0, CLI_OPT_REQUIRED,
	  "save the array in FILE.npy as the variable NAME" },
	{ CLI_OPT_STRING, "compress", "MODE", &compress, 0, 0,
	  "auto (default): lz4 where a sample says it saves >= 10% and runs\n"
	  "faster than the disk; lz4: wherever it saves >= 10%; none: raw" },
	{ CLI_OPT_SWITCH, "no-compress", NULL, &no_compress, 1, 0,
	  "the same as --compress none: every chunk raw (page-aligned,\nzero-copy readable)" },
	{ CLI_OPT_BYTES, "chunk-size", "BYTES", &chunk_size, 0, 0,
	  "raw bytes per chunk: a multiple of 4K from 4K to 1G (default 4M)" },
	{ CLI_OPT_INT, "step", "N", &step, 0, 0,
	  "write OUT/ckpt-N under the root OUT and make it the latest" },
	{ CLI_OPT_LIST, "shards", "NAME=N", &shard_opts, 0, 0,
	  "save array NAME as a sharded variable of N shards (div layout\n"
	  "along the first axis; attributes kind=sharded, shards, layout).\n"
	  "Repeatable" },
	{ CLI_OPT_INT, "keep", "K", &keep, 0, 0,
	  "with --step: keep the K latest checkpoints, delete older ones\n(0 keeps all)" },
	CLI_PROGRESS_OPTS(&progress),
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"Arrays must be C-order and little-endian (or byte-order-free): bool, int8-64,\n"
	"uint8-64, float16, float32 or float64, of rank 0 to 8. numpy has no bfloat16,\n"
	"so a bfloat16 variable cannot come from a .npy file. --shards NAME=N splits\n"
	"the rows as TensorFlow's div rule does (N capped by the rows; one shard is\n"
	"a plain variable). Nothing is left at OUT when the import fails.",
	NULL
};

/* Split each NAME=FILE and reject duplicate names: usage errors, before any I/O. */
static int split_pairs(const char **names, const char **files)
{
	for (int i = 0; i < pairs.n; i++) {
		char *eq = strchr(pairs.v[i], '=');
		if (!eq || eq == pairs.v[i] || eq[1] == '\0')
			return cli_usage_error("import", "'%s' is not NAME=FILE.npy", pairs.v[i]);
		*eq = '\0';
		names[i] = pairs.v[i];
		files[i] = eq + 1;
		for (int j = 0; j < i; j++)
			if (strcmp(names[j], names[i]) == 0)
				return cli_usage_error("import", "variable '%s' is given twice", names[i]);
	}
	return 0;
}

/* Apply each --shards NAME=N to its array: nshards[i] (0 when not sharded). */
static int split_shards(const char **names, int64_t *nshards)
{
	for (int k = 0; k < shard_opts.n; k++) {
		char *text = shard_opts.v[k], *eq = strrchr(text, '='), *end;
		int i;
		if (!eq || eq == text || eq[1] < '0' || eq[1] > '9')
			return cli_usage_error("import", "--shards '%s' is not NAME=N", text);
		long long n = strtoll(eq + 1, &end, 10);
		if (*end || n > INT32_MAX)
			return cli_usage_error("import", "--shards '%s': N must be a whole number", text);
		if (n < 1)
			return cli_usage_error("import", "--shards '%s': N must be at least 1", text);
		*eq = '\0';
		for (i = 0; i < pairs.n && strcmp(names[i], text) != 0; i++)
			;
		if (i == pairs.n)
			return cli_usage_error("import", "--shards: no array named '%s' is imported", text);
		if (nshards[i])
			return cli_usage_error("import", "--shards gives '%s' twice", text);
		nshards[i] = n;
	}
	return 0;
}

static dvar_compress mode;

static int check_options(void)
{
	int rc;

	if (no_compress)
		mode = DVAR_COMPRESS_NONE;
	else if ((rc = cli_parse_compress("import", compress, &mode)) != 0)
		return rc;
	if (keep >= 0 && step < 0)
		return cli_usage_error("import", "--keep needs --step");
	if (keep > INT32_MAX)
		return cli_usage_error("import", "--keep %lld is too large", (long long)keep);
	return cli_check_chunk_size("import", chunk_size);
}

/* Add array a as n div shards, each one slice pointing into the mapped rows. */
static int add_sharded(dvar_writer *w, const char *name, const cli_npy *a, int64_t want)
{
	int64_t *offsets = NULL, n = 0;
	dvar_slice sl;
	int rc = cli_layout("import", name, &a->shape, want, &offsets, &n);

	if (rc != CLI_EXIT_OK)
		return DVAR_EINVAL; /* reported */
	if (n < want && a->shape.rank == 0)
		fprintf(stderr, "dvar import: note: '%s' is a scalar: 1 shard, not %lld\n", name,
		        (long long)want);
	else if (n < want)
		fprintf(stderr, "dvar import: note: '%s' has %lld row%s: %lld shard%s, not %lld\n",
		        name, (long long)a->shape.dims[0], a->shape.dims[0] == 1 ? "" : "s",
		        (long long)n, n == 1 ? "" : "s", (long long)want);
	uint64_t row = 0;
	if (a->shape.rank && a->shape.dims[0])
		row = a->data_bytes / (uint64_t)a->shape.dims[0];
	for (int64_t k = 0; rc == DVAR_OK && k < n; k++) {
		cli_shard_slice(&a->shape, offsets, k, &sl);
		rc = dvar_writer_add(w, name, a->dtype, &a->shape, n > 1 ? &sl : NULL,
		                     (const char *)a->data + (uint64_t)offsets[k] * row);
	}
	if (rc == DVAR_OK)
		rc = cli_set_shard_attrs(w, name, n);
	if (rc != DVAR_OK)
		cli_error_dvar("import");
	free(offsets);
	return rc;
}

/* Open, add every array, commit. */
static int write_checkpoint(const char **names, const cli_npy *arrays, const int64_t *nshards)
{
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w = NULL;
	cli_progress pr;
	int rc;

	cli_progress_init(&pr, "import", progress, 0);
	/* The writer counts bytes done but not the total, which only we know. */
	for (int i = 0; i < pairs.n; i++)
		pr.total += arrays[i].data_bytes;
	wo.chunk_size = chunk_size;
	wo.compress = mode;
	wo.keep_last = keep > 0 ? (int)keep : 0;
	wo.progress = cli_progress_update;
	wo.progress_userdata = &pr;

	if (step >= 0)
		rc = dvar_writer_open_step(&w, out_path, step, &wo);
	else
		rc = dvar_writer_open(&w, out_path, &wo);
	int reported = 0;
	for (int i = 0; rc == DVAR_OK && i < pairs.n; i++) {
		if (nshards[i]) {
			rc = add_sharded(w, names[i], &arrays[i], nshards[i]);
			reported = rc != DVAR_OK;
		} else {
			rc = dvar_writer_add(w, names[i], arrays[i].dtype, &arrays[i].shape, NULL,
			                     arrays[i].data);
		}
	}
	if (rc == DVAR_OK)
		rc = dvar_writer_commit(w);
	cli_progress_end(&pr);
	if (rc != DVAR_OK && !reported)
		cli_error_dvar("import");
	dvar_writer_free(w);
	return rc == DVAR_OK ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
}

int cmd_import(int argc, char **argv)
{
	char err[512];
	struct stat st;
	int rc = cli_parse(&usage, argc, argv);

	if (rc != CLI_CONTINUE)
		return rc;
	if ((rc = check_options()) != 0)
		return rc;
	const char **names = calloc((size_t)pairs.n, sizeof(*names));
	const char **files = calloc((size_t)pairs.n, sizeof(*files));
	cli_npy *arrays = calloc((size_t)pairs.n, sizeof(*arrays));
	int64_t *nshards = calloc((size_t)pairs.n, sizeof(*nshards));
	int mapped = 0;
	if (!names || !files || !arrays || !nshards) {
		rc = cli_error("import", "out of memory");
		goto done;
	}
	if ((rc = split_pairs(names, files)) != 0 || (rc = split_shards(names, nshards)) != 0)
		goto done;
	for (; mapped < pairs.n; mapped++) {
		if (cli_npy_open(&arrays[mapped], files[mapped], err, sizeof(err)) != 0) {
			rc = cli_error("import", "%s", err);
			goto done;
		}
		if (arrays[mapped].trailing)
			fprintf(stderr, "dvar import: note: '%s' has %llu bytes after the array data; "
			                "they are ignored\n",
			        files[mapped], (unsigned long long)arrays[mapped].trailing);
	}

	/* A root the import creates must not outlive a failed import. */
	int root_existed = step >= 0 && stat(out_path, &st) == 0;
	rc = write_checkpoint(names, arrays, nshards);
	if (rc != CLI_EXIT_OK && step >= 0 && !root_existed)
		rmdir(out_path);
done:
	for (int i = 0; i < mapped; i++)
		cli_npy_close(&arrays[i]);
	free(arrays);
	free(nshards);
	free(files);
	free(names);
	return rc;
}
