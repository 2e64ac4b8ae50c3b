/*
 * cli/cmd_verify.c - `dvar verify`: read every chunk of every variable and check
 * its checksum, naming each bad chunk (variable, data file, offset, chunk
 * number). Exit 1 when any chunk is bad, 3 when the checkpoint cannot be
 * opened or walked at all. --against OTHER then compares every variable's
 * digest (dvar_reader_digest) with OTHER's: exit 1 on any difference too.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char *path;
static int json;
static int short_names;
static int progress = -1;
static const char *against;

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "PATH", NULL, &path, 0, CLI_OPT_REQUIRED,
	  "a checkpoint directory, a root with a `checkpoint` file, or a\n"
	  "TensorFlow checkpoint (its prefix, or a directory naming it)" },
	{ CLI_OPT_SWITCH, "json", NULL, &json, 1, 0, "print one JSON document on stdout" },
	{ CLI_OPT_SWITCH, "short-names", NULL, &short_names, 1, 0,
	  "name bad variables by their TF2 short names (see 'dvar help inspect');\n"
	  "with --against, match variables by them too" },
	{ CLI_OPT_STRING, "against", "OTHER", &against, 0, 0,
	  "then compare every variable's digest with OTHER's (see 'dvar help\n"
	  "digest'): the same names, dtypes, shapes and values" },
	CLI_PROGRESS_OPTS(&progress),
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"Every bad chunk is printed as it is found, then a summary:\n"
	"\"N variables, M chunks, X bytes checked: OK\" (or \"K bad chunks\").\n"
	"In a TensorFlow checkpoint every saved entry (a variable, or one slice\n"
	"of a partitioned one) is one chunk, checked against TF's CRC-32C.\n"
	"A chunk that cannot be read at all (its data file missing, not\n"
	"readable, a directory, an I/O error) is not corrupt: it is printed as\n"
	"\"unreadable chunk: ...\" with the system's reason, and verify exits 3.\n"
	"--json prints {\"schema_version\":1,\"path\",\"bad_chunks\":[{\"variable\",\"file\",\n"
	"\"offset\",\"chunk\",\"unreadable\",\"message\"}],\"num_variables\",\"num_chunks\",\n"
	"\"bytes\",\"num_bad\" (corrupt chunks),\"num_unreadable\",\"ok\"}; when the walk\n"
	"fails or a chunk is unreadable, the document ends with \"ok\":false,\"error\".\n"
	"With --against OTHER, PATH's chunks are checked as above, then each\n"
	"variable of PATH and OTHER is compared by digest: a variable in only one\n"
	"(\"only in OTHER: x\"), another dtype or shape (\"shape differs: x: [3,2] vs\n"
	"[2,3]\") or another digest (\"digest differs: x: 1a2b3c4d vs 5e6f7a8b\") is\n"
	"printed, then \"against OTHER: N variables compared: OK\" (or \"K differ\").\n"
	"OTHER's digests combine from its index where its slices allow, without\n"
	"reading its chunks: verify OTHER too to check them. String tensors are\n"
	"not compared (a note says so). The JSON document gets \"against\":{\"path\",\n"
	"\"differences\":[{\"name\",\"status\" (\"only_in_path\", \"only_in_other\",\n"
	"\"dtype_differs\", \"shape_differs\" or \"digest_differs\"),\"dtype\",\n"
	"\"other_dtype\",\"shape\",\"other_shape\",\"digest\",\"other_digest\"}],\n"
	"\"num_compared\",\"num_different\",\"ok\"} (the fields that apply), and \"ok\"\n"
	"covers both checks.",
	"a chunk is corrupt, or --against found a difference"
};

/* Chunks that could not be read at all, which is not corruption: the first one's reason. */
static uint64_t num_unreadable;
static char unreadable_why[512];

/*
 * Why a bad chunk's data file cannot be read (missing, no permission, a
 * directory, an I/O error), or NULL when it holds bad bytes. The library
 * reports a missing data file as damage (DVAR_ECORRUPT), which this command
 * counts as unreadable, as it does any data file it cannot read: so the
 * file is tried here.
 */
static const char *unreadable(const dvar_bad_chunk *bad)
{
	char byte;

	if (bad->code != DVAR_ECORRUPT)
		return bad->message;
	int fd = open(bad->file, O_RDONLY);
	if (fd < 0)
		return strerror(errno);
	ssize_t n = pread(fd, &byte, 1, 0);
	int err = errno;
	close(fd);
	return n < 0 ? strerror(err) : NULL;
}

static void report_bad(void *userdata, const dvar_bad_chunk *bad)
{
	cli_json *j = userdata;
	char *shown = short_names ? dvar_short_name(bad->var) : NULL;
	const char *var = shown ? shown : bad->var;
	const char *why = unreadable(bad);
	int cannot_read = why != NULL;

	if (cannot_read && num_unreadable++ == 0)
		snprintf(unreadable_why, sizeof(unreadable_why), "%s: %s", bad->file, why);
	if (!j) {
		printf("%s chunk: variable '%s', file %s, offset %" PRIu64 ", chunk %" PRIu64 ": %s\n",
		       cannot_read ? "unreadable" : "bad", var, bad->file, bad->offset, bad->chunk,
		       bad->message);
		dvar_free(shown);
		return;
	}
	cli_json_object(j, NULL);
	cli_json_str(j, "variable", var);
	dvar_free(shown);
	cli_json_str(j, "file", bad->file);
	cli_json_u64(j, "offset", bad->offset);
	cli_json_u64(j, "chunk", bad->chunk);
	cli_json_bool(j, "unreadable", cannot_read);
	cli_json_str(j, "message", bad->message);
	cli_json_end(j);
}

/* ------------------------------------------------------------ --against */

/* A variable by the name it is matched by: its name, or its short name. */
typedef struct {
	char *key; /* malloc'ed */
	size_t i;
} keyed;

static int by_key(const void *a, const void *b)
{
	return strcmp(((const keyed *)a)->key, ((const keyed *)b)->key);
}

static void keys_free(keyed *k, size_t n)
{
	/* The keys are dvar_short_name's with --short-names, strdup's otherwise. */
	for (size_t x = 0; k && x < n; x++) {
		if (short_names)
			dvar_free(k[x].key);
		else
			free(k[x].key);
	}
	free(k);
}

/* r's variables sorted by key (*out, dvar_reader_num_vars(r) of them); an
 * exit code after reporting. */
static int keys_init(dvar_reader *r, keyed **out)
{
	size_t n = dvar_reader_num_vars(r);
	keyed *k = calloc(n ? n : 1, sizeof(*k));
	dvar_var_info v;

	if (!(*out = k))
		return cli_error("verify", "out of memory");
	for (size_t i = 0; i < n; i++) {
		if (dvar_reader_var(r, i, &v) != DVAR_OK)
			return cli_error_dvar("verify");
		k[i].i = i;
		if (!(k[i].key = short_names ? dvar_short_name(v.name) : strdup(v.name)))
			return cli_error("verify", "out of memory");
	}
	qsort(k, n, sizeof(*k), by_key);
	for (size_t x = 1; x < n; x++)
		if (strcmp(k[x - 1].key, k[x].key) == 0)
			return cli_error("verify", "--short-names: '%s' is the short name of two variables "
			                           "of '%s'; compare without --short-names", k[x].key,
			                 dvar_reader_path(r));
	return CLI_EXIT_OK;
}

typedef enum { ONLY_IN_PATH, ONLY_IN_OTHER, DTYPE_DIFFERS, SHAPE_DIFFERS, DIGEST_DIFFERS } difference;

static const char *const difference_names[] = {
	"only_in_path", "only_in_other", "dtype_differs", "shape_differs", "digest_differs"
};

/* One difference as a line or a JSON object; va and vb are NULL for a
 * variable only one side has, the digests apply to DIGEST_DIFFERS. */
static void report_difference(cli_json *j, difference d, const char *name, const dvar_var_info *va,
                              const dvar_var_info *vb, uint32_t da, uint32_t db)
{
	char ta[CLI_DTYPE_TEXT_MAX], tb[CLI_DTYPE_TEXT_MAX], sa[200], sb[200], ca[9], cb[9];

	if (va && vb) {
		cli_dtype_text(va->dtype, ta, sizeof(ta));
		cli_dtype_text(vb->dtype, tb, sizeof(tb));
		dvar_shape_format(&va->shape, sa, sizeof(sa));
		dvar_shape_format(&vb->shape, sb, sizeof(sb));
	}
	snprintf(ca, sizeof(ca), "%08x", da);
	snprintf(cb, sizeof(cb), "%08x", db);
	if (!j) {
		if (d == ONLY_IN_PATH || d == ONLY_IN_OTHER)
			printf("only in %s: %s\n", d == ONLY_IN_PATH ? path : against, name);
		else if (d == DTYPE_DIFFERS)
			printf("dtype differs: %s: %s vs %s\n", name, ta, tb);
		else if (d == SHAPE_DIFFERS)
			printf("shape differs: %s: %s vs %s\n", name, sa, sb);
		else
			printf("digest differs: %s: %s vs %s\n", name, ca, cb);
		return;
	}
	cli_json_object(j, NULL);
	cli_json_str(j, "name", name);
	cli_json_str(j, "status", difference_names[d]);
	if (va && vb) {
		cli_json_str(j, "dtype", ta);
		cli_json_str(j, "other_dtype", tb);
		cli_json_dims(j, "shape", va->shape.dims, va->shape.rank);
		cli_json_dims(j, "other_shape", vb->shape.dims, vb->shape.rank);
	}
	if (d == DIGEST_DIFFERS) {
		cli_json_str(j, "digest", ca);
		cli_json_str(j, "other_digest", cb);
	}
	cli_json_end(j);
}

/* Compare variable ia of r with ib of other: *compared and *differ count. */
static int compare_pair(dvar_reader *r, size_t ia, dvar_reader *other, size_t ib,
                        const char *name, cli_json *j, size_t *compared, size_t *differ)
{
	dvar_var_info va, vb;
	uint32_t da = 0, db = 0;
	difference d = DIGEST_DIFFERS;
	char dtype[CLI_DTYPE_TEXT_MAX];

	if (dvar_reader_var(r, ia, &va) != DVAR_OK || dvar_reader_var(other, ib, &vb) != DVAR_OK)
		return cli_error_dvar("verify");
	if (va.dtype != vb.dtype) {
		d = DTYPE_DIFFERS;
	} else if (!dvar_shape_equal(&va.shape, &vb.shape)) {
		d = SHAPE_DIFFERS;
	} else if (!cli_dtype_numeric(va.dtype)) {
		fprintf(stderr, "dvar verify: note: variable '%s' %s %s: not compared\n", name,
		        va.dtype == DVAR_DTYPE_STRING ? "is a" : "has", va.dtype == DVAR_DTYPE_STRING ?
		        "string tensor" : cli_dtype_text(va.dtype, dtype, sizeof(dtype)));
		return CLI_EXIT_OK;
	} else {
		if (dvar_reader_digest(r, ia, &da) != DVAR_OK ||
		    dvar_reader_digest(other, ib, &db) != DVAR_OK)
			return cli_error_dvar("verify");
		(*compared)++;
		if (da == db)
			return CLI_EXIT_OK;
	}
	(*differ)++;
	report_difference(j, d, name, &va, &vb, da, db);
	return CLI_EXIT_OK;
}

/* Variable k is in one checkpoint only: a difference, unless it is a string
 * tensor, which no conversion out of TensorFlow carries (a note says so). */
static void only_in(cli_json *j, difference d, dvar_reader *r, const keyed *k, size_t *differ)
{
	dvar_var_info v;

	if (dvar_reader_var(r, k->i, &v) == DVAR_OK && v.dtype == DVAR_DTYPE_STRING) {
		fprintf(stderr, "dvar verify: note: variable '%s', a string tensor, is only in '%s': "
		                "not compared\n", k->key, dvar_reader_path(r));
		return;
	}
	(*differ)++;
	report_difference(j, d, k->key, NULL, NULL, 0, 0);
}

/* Walk both sorted key lists at once; every difference is reported. */
static int compare_all(dvar_reader *r, dvar_reader *other, cli_json *j, size_t *compared,
                       size_t *differ)
{
	keyed *ka = NULL, *kb = NULL;
	size_t na = dvar_reader_num_vars(r), nb = dvar_reader_num_vars(other), a = 0, b = 0;
	int rc;

	if ((rc = keys_init(r, &ka)) == CLI_EXIT_OK)
		rc = keys_init(other, &kb);
	while (rc == CLI_EXIT_OK && (a < na || b < nb)) {
		int c = a == na ? 1 : b == nb ? -1 : strcmp(ka[a].key, kb[b].key);
		if (c < 0) {
			only_in(j, ONLY_IN_PATH, r, &ka[a++], differ);
		} else if (c > 0) {
			only_in(j, ONLY_IN_OTHER, other, &kb[b++], differ);
		} else {
			rc = compare_pair(r, ka[a].i, other, kb[b].i, ka[a].key, j, compared, differ);
			a++;
			b++;
		}
	}
	keys_free(ka, na);
	keys_free(kb, nb);
	return rc;
}

/* The --against section: differences, then a summary; *differ counts them. */
static int report_against(dvar_reader *r, dvar_reader *other, cli_json *j, size_t *differ)
{
	size_t compared = 0;

	if (j) {
		cli_json_object(j, "against");
		cli_json_str(j, "path", dvar_reader_path(other));
		cli_json_array(j, "differences");
	}
	int rc = compare_all(r, other, j, &compared, differ);
	if (rc != CLI_EXIT_OK)
		return rc; /* reported, which in --json mode ended the document */
	if (j) {
		cli_json_end(j);
		cli_json_u64(j, "num_compared", compared);
		cli_json_u64(j, "num_different", *differ);
		cli_json_bool(j, "ok", *differ == 0);
		cli_json_end(j);
	} else if (*differ == 0) {
		printf("against %s: %zu variable%s compared: OK\n", against, compared,
		       compared == 1 ? "" : "s");
	} else {
		printf("against %s: %zu variable%s compared: %zu differ%s\n", against, compared,
		       compared == 1 ? "" : "s", *differ, *differ == 1 ? "s" : "");
	}
	return rc;
}

int cmd_verify(int argc, char **argv)
{
	dvar_read_options ro = DVAR_READ_OPTIONS_INIT;
	dvar_reader *r = NULL, *other = NULL;
	dvar_var_info v;
	uint64_t chunks = 0, bytes = 0, num_bad = 0;
	size_t differ = 0;
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
	/* OTHER is opened first of all: a wrong path fails before the long walk. */
	if (against && dvar_reader_open(&other, against, NULL) != DVAR_OK) {
		rc = cli_error_dvar("verify");
		goto done;
	}
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
	pr.enabled = 0; /* the digests' reads of r must not draw the line again */
	if (rc != DVAR_OK) {
		/* In --json mode this also ends the document, after the chunks found so far. */
		rc = cli_error_dvar("verify");
		goto done;
	}
	uint64_t num_corrupt = num_bad - num_unreadable;
	if (json) {
		cli_json_end(&j);
		cli_json_u64(&j, "num_variables", n);
		cli_json_u64(&j, "num_chunks", chunks);
		cli_json_u64(&j, "bytes", bytes);
		cli_json_u64(&j, "num_bad", num_corrupt);
		cli_json_u64(&j, "num_unreadable", num_unreadable);
	} else {
		printf("%zu variable%s, %" PRIu64 " chunk%s, %" PRIu64 " byte%s checked: ", n,
		       n == 1 ? "" : "s", chunks, chunks == 1 ? "" : "s", bytes, bytes == 1 ? "" : "s");
		if (num_bad == 0)
			printf("OK\n");
		else if (num_unreadable == 0)
			printf("%" PRIu64 " bad chunk%s\n", num_corrupt, num_corrupt == 1 ? "" : "s");
		else if (num_corrupt == 0)
			printf("%" PRIu64 " unreadable chunk%s\n", num_unreadable,
			       num_unreadable == 1 ? "" : "s");
		else
			printf("%" PRIu64 " bad chunk%s, %" PRIu64 " unreadable\n", num_corrupt,
			       num_corrupt == 1 ? "" : "s", num_unreadable);
	}
	/* Unreadable is not corrupt: a runtime error, with the OS's reason. */
	if (num_unreadable) {
		rc = cli_error("verify", "%" PRIu64 " chunk%s could not be read, so %s not checked "
		                         "(%s)", num_unreadable, num_unreadable == 1 ? "" : "s",
		               num_unreadable == 1 ? "it was" : "they were", unreadable_why);
		goto done;
	}
	rc = other ? report_against(r, other, json ? &j : NULL, &differ) : CLI_EXIT_OK;
	if (json) {
		cli_json_bool(&j, "ok", rc == CLI_EXIT_OK && num_bad == 0 && differ == 0);
		cli_json_end(&j);
	}
	if (rc == CLI_EXIT_OK)
		rc = num_bad || differ ? CLI_EXIT_CHECK : CLI_EXIT_OK;
done:
	dvar_reader_free(other);
	dvar_reader_free(r);
	return rc;
}
