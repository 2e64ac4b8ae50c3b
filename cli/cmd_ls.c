/*
 * cli/cmd_ls.c - `dvar ls`: the committed checkpoints under a root, in step
 * order, with what the root's `checkpoint` file says of each (latest, kept).
 *
 * The same directory may hold TensorFlow checkpoints: PREFIX.index plus
 * PREFIX.data-NNNNN-of-MMMMM files, named by TF's `checkpoint` state file
 * (model_checkpoint_path, all_model_checkpoint_paths). libdvar lists only
 * dvar checkpoints (dvar_root_list_open), so the TensorFlow ones are found
 * here with plain file-system code: every PREFIX.index in the directory,
 * plus whatever the state file names elsewhere (dvar_checkpoint_state_read
 * parses it). The leftovers of writers that died come from the library's
 * listing too.
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const char *root;
static int json;

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "ROOT", NULL, &root, 0, CLI_OPT_REQUIRED,
	  "a checkpoint root, or a directory of TensorFlow checkpoints" },
	{ CLI_OPT_SWITCH, "json", NULL, &json, 1, 0, "print one JSON document on stdout" },
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"MARKS: \"latest\" for the checkpoint the `checkpoint` file points to, \"kept\"\n"
	"for those it lists, \"tf\" for a TensorFlow checkpoint: every NAME.index in\n"
	"ROOT, and every prefix TF's `checkpoint` state file names (as it names\n"
	"it). SIZE adds up its .index and data files; every read command takes\n"
	"ROOT/NAME.\n"
	"STEP is the number after the name's last '-' (ckpt-100, model.ckpt-100).\n"
	"LEFTOVER lines are what writers left without committing (hidden names carrying\n"
	"the writer's host and pid): WRITER is \"running\", \"gone\" (the next writer\n"
	"into ROOT removes it) or \"unknown\" (another host, or a multi-part save's\n"
	"own token).\n"
	"--json prints {\"schema_version\":1,\"root\",\"checkpoints\":[{\"name\",\"step\",\n"
	"\"bytes\",\"latest\",\"kept\",\"format\"}],\"leftovers\":[{\"name\",\"target\",\n"
	"\"bytes\",\"host\",\"pid\",\"writer\"}]}; step is null for a name without one;\n"
	"format is \"dvar\" or \"tf\"; host and pid are null when the name does not say.",
	NULL
};

/* One line of the listing. */
typedef struct {
	char *name;
	int64_t step;
	uint64_t bytes;
	int latest, kept, tf;
	const char *base; /* a delta's, borrowed from the root listing */
	dev_t dev;  /* of a TF checkpoint's .index, to know it under any spelling */
	ino_t ino;
} entry;

typedef struct {
	entry *v;
	size_t n, cap;
} entries;

static int64_t step_of(const char *name)
{
	const char *dash = strrchr(name, '-');
	char *end;

	if (!dash || dash[1] < '0' || dash[1] > '9')
		return -1;
	long long v = strtoll(dash + 1, &end, 10);
	return *end || v < 0 ? -1 : (int64_t)v;
}

static entry *add(entries *l, const char *name)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		entry *v = realloc(l->v, cap * sizeof(entry));
		if (!v)
			return NULL;
		l->v = v;
		l->cap = cap;
	}
	entry *e = &l->v[l->n];
	memset(e, 0, sizeof(*e));
	if (!(e->name = strdup(name)))
		return NULL;
	e->step = step_of(name);
	l->n++;
	return e;
}

static void entries_free(entries *l)
{
	for (size_t k = 0; k < l->n; k++)
		free(l->v[k].name);
	free(l->v);
}

static int by_step(const void *a, const void *b)
{
	const entry *x = a, *y = b;

	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* name as the state file writes it, resolved: relative names are under ROOT. */
static char *resolve(const char *name)
{
	size_t len = strlen(root) + strlen(name) + 2;
	char *p = malloc(len);

	if (!p)
		return NULL;
	if (name[0] == '/')
		snprintf(p, len, "%s", name);
	else
		snprintf(p, len, "%s/%s", root, name);
	return p;
}

/* 1 when file is BASE.data-NNNNN-of-MMMMM. */
static int is_data_file(const char *file, const char *base)
{
	size_t n = strlen(base);
	const char *p = file + n;

	if (strncmp(file, base, n) != 0 || strncmp(p, ".data-", 6) != 0)
		return 0;
	p += 6;
	/* NNNNN-of-MMMMM: digits at 0-4 and 9-13, "-of-" at 5-8. */
	for (int k = 0; k < 14; k++) {
		if (k >= 5 && k < 9) {
			if (p[k] != "-of-"[k - 5])
				return 0;
		} else if (p[k] < '0' || p[k] > '9') {
			return 0;
		}
	}
	return p[14] == '\0';
}

/* Bytes of PREFIX.index and PREFIX.data-*-of-* (prefix resolved). */
static uint64_t tf_bytes(const char *prefix, uint64_t index_bytes)
{
	const char *slash = strrchr(prefix, '/');
	char *dir = slash ? strndup(prefix, (size_t)(slash - prefix) + 1) : strdup(".");
	const char *base = slash ? slash + 1 : prefix;
	uint64_t total = index_bytes;
	struct dirent *d;
	struct stat st;
	DIR *dp;

	if (!dir || !(dp = opendir(dir))) {
		free(dir);
		return total;
	}
	while ((d = readdir(dp))) {
		if (!is_data_file(d->d_name, base))
			continue;
		size_t len = strlen(dir) + strlen(d->d_name) + 2;
		char *p = malloc(len);
		if (!p)
			break;
		snprintf(p, len, "%s/%s", dir, d->d_name);
		if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
			total += (uint64_t)st.st_size;
		free(p);
	}
	closedir(dp);
	free(dir);
	return total;
}

/* The entry of TF checkpoint name (as the state file or the directory names it):
 * found by its .index, added when new. NULL with *missing set when it has none. */
static entry *tf_entry(entries *l, const char *name, int *missing, int *oom)
{
	char *prefix = resolve(name);
	char *index = prefix ? malloc(strlen(prefix) + sizeof(".index")) : NULL;
	struct stat st;
	entry *e = NULL;

	*missing = 0;
	if (!index) {
		*oom = 1;
		free(prefix);
		return NULL;
	}
	sprintf(index, "%s.index", prefix);
	if (stat(index, &st) != 0 || !S_ISREG(st.st_mode)) {
		/* A dvar root's checkpoint is a directory: libdvar lists it. */
		struct stat dir;
		*missing = stat(prefix, &dir) != 0 || !S_ISDIR(dir.st_mode);
		goto done;
	}
	for (size_t k = 0; k < l->n; k++) {
		if (l->v[k].tf && l->v[k].dev == st.st_dev && l->v[k].ino == st.st_ino) {
			e = &l->v[k];
			goto done;
		}
	}
	if (!(e = add(l, name))) {
		*oom = 1;
		goto done;
	}
	e->tf = 1;
	e->dev = st.st_dev;
	e->ino = st.st_ino;
	e->bytes = tf_bytes(prefix, (uint64_t)st.st_size);
done:
	free(index);
	free(prefix);
	return e;
}

/* 1 when the state file's name k (its latest after all the kept ones) came earlier:
 * the latest is usually among the kept, and is noted once. */
static int named_before(const dvar_checkpoint_state *s, size_t k)
{
	const char *name = k < s->num_all ? s->all[k] : s->latest;
	for (size_t j = 0; j < k; j++)
		if (strcmp(s->all[j], name) == 0)
			return 1;
	return 0;
}

/*
 * The TensorFlow checkpoints of ROOT: every PREFIX.index in it, and what the
 * state file names, marked. Returns CLI_EXIT_OK or an exit code.
 */
static int list_tf(entries *l)
{
	dvar_checkpoint_state state;
	int missing = 0, oom = 0;
	entry *e;

	DIR *dp = opendir(root);
	struct dirent *d;
	while (dp && !oom && (d = readdir(dp))) {
		size_t n = strlen(d->d_name);
		if (d->d_name[0] == '.' || n <= 6 || strcmp(d->d_name + n - 6, ".index") != 0)
			continue;
		char *name = strndup(d->d_name, n - 6);
		if (!name)
			oom = 1;
		else
			tf_entry(l, name, &missing, &oom);
		free(name);
	}
	if (dp)
		closedir(dp);
	int rc = dvar_checkpoint_state_read(&state, root);
	if (rc != DVAR_OK && rc != DVAR_ENOTFOUND)
		fprintf(stderr, "dvar ls: note: %s; nothing marked latest or kept\n", cli_dvar_message());
	if (rc != DVAR_OK)
		return oom ? cli_error("ls", "out of memory") : CLI_EXIT_OK;
	/* A missing name is said in the terms of what the directory holds. */
	int has_dvar = 0, has_tf = 0;
	for (size_t k = 0; k < l->n; k++) {
		has_tf |= l->v[k].tf;
		has_dvar |= !l->v[k].tf;
	}
	for (size_t k = 0; k <= state.num_all && !oom; k++) {
		const char *name = k < state.num_all ? state.all[k] : state.latest;
		if ((e = tf_entry(l, name, &missing, &oom))) {
			e->kept |= k < state.num_all;
			e->latest |= k == state.num_all;
		} else if (missing && !named_before(&state, k)) {
			const char *as = strcmp(name, state.latest) == 0 ? "as latest" : "as kept";
			if (has_dvar && !has_tf)
				fprintf(stderr, "dvar ls: note: the checkpoint file names '%s' %s, but there is no "
				                "checkpoint directory '%s'\n", name, as, name);
			else if (has_tf && !has_dvar)
				fprintf(stderr, "dvar ls: note: the checkpoint file names '%s' %s, which is not "
				                "there (no %s.index)\n", name, as, name);
			else
				fprintf(stderr, "dvar ls: note: the checkpoint file names '%s' %s, which is not "
				                "there (no checkpoint directory '%s', no %s.index)\n", name, as,
				        name, name);
		}
	}
	dvar_checkpoint_state_clear(&state);
	return oom ? cli_error("ls", "out of memory") : CLI_EXIT_OK;
}

/* What writers left in ROOT without committing: a table after the checkpoints, or j's
 * "leftovers" array. */
static void list_leftovers(const dvar_root_list *dl, cli_json *j)
{
	static const char *const writer[] = { "unknown", "gone", "running" };
	size_t n = dvar_root_list_num_leftovers(dl);
	dvar_root_leftover o;
	char size[32];

	if (j)
		cli_json_array(j, "leftovers");
	else if (n)
		printf("\n%-48s  %10s  %s\n", "LEFTOVER", "SIZE", "WRITER");
	for (size_t i = 0; i < n; i++) {
		if (dvar_root_list_leftover(dl, i, &o) != DVAR_OK)
			continue;
		if (j) {
			cli_json_object(j, NULL);
			cli_json_str(j, "name", o.name);
			cli_json_str(j, "target", o.target);
			cli_json_u64(j, "bytes", o.bytes);
			cli_json_str(j, "host", o.pid ? o.host : NULL);
			if (o.pid)
				cli_json_i64(j, "pid", o.pid);
			else
				cli_json_str(j, "pid", NULL);
			cli_json_str(j, "writer", writer[o.writer_alive + 1]);
			cli_json_end(j);
			continue;
		}
		cli_format_bytes(size, sizeof(size), o.bytes);
		printf("%-48s  %10s  %s", o.name, size, writer[o.writer_alive + 1]);
		if (o.pid)
			printf(" (pid %" PRId64 " on %s)", o.pid, o.host);
		putchar('\n');
	}
	if (j)
		cli_json_end(j);
}

int cmd_ls(int argc, char **argv)
{
	dvar_root_list *dl = NULL;
	dvar_root_entry de;
	entries l = { 0 };
	cli_json j;
	char size[32];
	int rc = cli_parse(&usage, argc, argv);

	if (rc != CLI_CONTINUE)
		return rc;
	if (dvar_root_list_open(&dl, root) != DVAR_OK)
		return cli_error_dvar("ls");
	rc = CLI_EXIT_OK;
	for (size_t i = 0; rc == CLI_EXIT_OK && i < dvar_root_list_count(dl); i++) {
		entry *e;
		if (dvar_root_list_get(dl, i, &de) != DVAR_OK)
			rc = cli_error_dvar("ls");
		else if (!(e = add(&l, de.name)))
			rc = cli_error("ls", "out of memory");
		else {
			e->step = de.step;
			e->bytes = de.bytes;
			e->latest = de.is_latest;
			e->kept = de.is_kept;
			e->base = de.base;
		}
	}
	if (rc == CLI_EXIT_OK)
		rc = list_tf(&l);
	if (rc != CLI_EXIT_OK) {
		dvar_root_list_free(dl);
		entries_free(&l);
		return rc;
	}
	if (l.n)
		qsort(l.v, l.n, sizeof(entry), by_step);
	if (json) {
		cli_json_begin(&j, stdout);
		cli_json_str(&j, "root", root);
		cli_json_array(&j, "checkpoints");
	} else if (l.n) {
		printf("%8s  %-20s  %10s  %s\n", "STEP", "NAME", "SIZE", "MARKS");
	} else {
		/* A checkpoint given for its root: say where its checkpoints are listed. */
		dvar_reader *r = NULL;
		if (dvar_reader_open(&r, root, NULL) == DVAR_OK)
			fprintf(stderr,
			        "dvar ls: '%s' is a checkpoint, not a checkpoint root (a directory "
			        "of checkpoints); 'dvar inspect %s' lists its variables\n",
			        root, root);
		else
			fprintf(stderr, "dvar ls: no checkpoints under '%s'\n", root);
		dvar_reader_free(r);
		dvar_error_clear();
	}
	for (size_t i = 0; i < l.n; i++) {
		const entry *e = &l.v[i];
		if (json) {
			cli_json_object(&j, NULL);
			cli_json_str(&j, "name", e->name);
			if (e->step >= 0)
				cli_json_i64(&j, "step", e->step);
			else
				cli_json_str(&j, "step", NULL);
			cli_json_u64(&j, "bytes", e->bytes);
			cli_json_bool(&j, "latest", e->latest);
			cli_json_bool(&j, "kept", e->kept);
			cli_json_str(&j, "format", e->tf ? "tf" : "dvar");
			cli_json_str(&j, "base", e->base);
			cli_json_end(&j);
			continue;
		}
		cli_format_bytes(size, sizeof(size), e->bytes);
		if (e->step >= 0)
			printf("%8" PRId64, e->step);
		else
			printf("%8s", "-");
		const char *marks[3] = { e->latest ? "latest" : NULL, e->kept ? "kept" : NULL,
		                         e->tf ? "tf" : NULL };
		int any = 0;
		printf("  %-20s  %10s  ", e->name, size);
		for (int m = 0; m < 3; m++)
			if (marks[m])
				printf("%s%s", any++ ? "," : "", marks[m]);
		/* What a delta needs: the checkpoint it was written over. */
		if (e->base)
			printf("%sdelta over %s", any ? "," : "", e->base);
		putchar('\n');
	}
	if (json)
		cli_json_end(&j);
	list_leftovers(dl, json ? &j : NULL);
	if (json)
		cli_json_end(&j);
	dvar_root_list_free(dl);
	entries_free(&l);
	return CLI_EXIT_OK;
}
