/*
 * cli/cmd_verify.c - `dvar verify`: read every chunk of every variable and check
 * its checksum, naming each bad chunk (variable, data file, offset, chunk
 * number). Exit 1 when any chunk is bad, 3 when the checkpoint cannot be
 * opened or walked at all.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "cli.h"

static const char *path;
static int json;
static int short_names;
static int progress = -1;

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "PATH", NULL, &path, 0, CLI_OPT_REQUIRED,
	  "a checkpoint directory, a root with a `checkpoint` file, or a\n"
	  "TensorFlow checkpoint (its prefix, or a directory naming it)" },
	{ CLI_OPT_SWITCH, "json", NULL, &json, 1, 0, "print one JSON document on stdout" },
	{ CLI_OPT_SWITCH, "short-names", NULL, &short_names, 1, 0,
	  "name bad variables by their TF2 short names (see 'dvar help inspect')" },
	CLI_PROGRESS_OPTS(&progress),
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"Every bad chunk is printed as it is found, then a summary:\n"
	"\"N variables, M chunks, X bytes checked: OK\" (or \"K bad chunks\").\n"
	"In a TensorFlow checkpoint every saved entry (a variable, or one slice\n"
	"of a partitioned one) is one chunk, checked against TF's CRC-32C.\n"
	"--json prints {\"schema_version\":1,\"path\",\"bad_chunks\":[{\"variable\",\"file\",\n"
	"\"offset\",\"chunk\",\"message\"}],\"num_variables\",\"num_chunks\",\"bytes\",\n"
	"\"num_bad\",\"ok\"}; when the walk itself fails, {...,\"error\",\"ok\":false}.",
	"a chunk is corrupt or unreadable"
};

static void report_bad(void *userdata, const dvar_bad_chunk *bad)
{
	cli_json *j = userdata;
	char *shown = short_names ? cli_short_name(bad->var) : NULL;
	const char *var = shown ? shown : bad->var;

	if (!j) {
		printf("bad chunk: variable '%s', file %s, offset %" PRIu64 ", chunk %" PRIu64 ": %s\n",
		       var, bad->file, bad->offset, bad->chunk, bad->message);
		free(shown);
		return;
	}
	cli_json_object(j, NULL);
	cli_json_str(j, "variable", var);
	free(shown);
	cli_json_str(j, "file", bad->file);
	cli_json_u64(j, "offset", bad->offset);
	cli_json_u64(j, "chunk", bad->chunk);
	cli_json_str(j, "message", bad->message);
	cli_json_end(j);
}

int cmd_verify(int argc, char **argv)
{
	dvar_read_options ro = DVAR_READ_OPTIONS_INIT;
	dvar_reader *r = NULL;
	dvar_var_info v;
	uint64_t chunks = 0, bytes = 0, num_bad = 0;
	cli_progress pr;
	cli_json j;
	int rc = cli_parse(&usage, argc, argv);

	if (rc != CLI_CONTINUE)
		return rc;
	cli_progress_init(&pr, "verify", progress, json);
	ro.progress = cli_progress_update;
	ro.progress_userdata = &pr;
	if (dvar_reader_open(&r, path, &ro) != DVAR_OK)
		return cli_error_dvar("verify");
	size_t n = dvar_reader_num_vars(r);
	for (size_t i = 0; i < n; i++) {
		if (dvar_reader_var(r, i, &v) != DVAR_OK) {
			rc = cli_error_dvar("verify");
			goto done;
		}
		chunks += v.num_chunks;
		bytes += v.stored_bytes;
	}

	if (json) {
		cli_json_begin(&j, stdout);
		cli_json_str(&j, "path", dvar_reader_path(r));
		cli_json_array(&j, "bad_chunks");
	}
	rc = dvar_reader_verify(r, report_bad, json ? &j : NULL, &num_bad);
	cli_progress_end(&pr);
	if (rc != DVAR_OK) {
		if (json) {
			/* Still one complete document, saying why the walk stopped. */
			cli_json_end(&j);
			cli_json_str(&j, "error", cli_dvar_message());
			cli_json_bool(&j, "ok", 0);
			cli_json_end(&j);
		}
		rc = cli_error_dvar("verify");
		goto done;
	}
	if (json) {
		cli_json_end(&j);
		cli_json_u64(&j, "num_variables", n);
		cli_json_u64(&j, "num_chunks", chunks);
		cli_json_u64(&j, "bytes", bytes);
		cli_json_u64(&j, "num_bad", num_bad);
		cli_json_bool(&j, "ok", num_bad == 0);
		cli_json_end(&j);
	} else if (num_bad == 0) {
		printf("%zu variables, %" PRIu64 " chunks, %" PRIu64 " bytes checked: OK\n", n, chunks,
		       bytes);
	} else {
		printf("%zu variables, %" PRIu64 " chunks, %" PRIu64 " bytes checked: %" PRIu64
		       " bad chunk%s\n", n, chunks, bytes, num_bad, num_bad == 1 ? "" : "s");
	}
	rc = num_bad ? CLI_EXIT_CHECK : CLI_EXIT_OK;
done:
	dvar_reader_free(r);
	return rc;
}
