/*
 * tests/unit/format/test_format_state.c - TensorFlow's `checkpoint` state
 * file (format/state.c): what TensorFlow's text-format parser accepts for a
 * CheckpointState is read, with the same values; what it refuses is
 * DVAR_ECORRUPT naming the file, the line and the trouble. Then the three
 * users: dvar_checkpoint_state_read, a root's pointer file, the reader.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

/* text parses; latest and the all list (NULL-terminated) are as given. */
static void parses(const char *text, const char *latest, const char *const *all)
{
	dvar_checkpoint_state s;
	int rc = dvar_checkpoint_state_parse(&s, text, strlen(text), "ckpt/checkpoint");
	if (rc != DVAR_OK)
		fail_msg("%s\n---\n%s", dvar_error_last()->message, text);
	assert_string_equal(s.latest, latest);
	size_t n = 0;
	for (; all && all[n]; n++) {
		assert_true(n < s.num_all);
		assert_string_equal(s.all[n], all[n]);
	}
	assert_int_equal(s.num_all, n);
	dvar_checkpoint_state_clear(&s);
	assert_null(s.latest);
	assert_null(s.all);
}

/* text is refused, with a message holding each of the needles (NULL-terminated). */
static void refused(const char *text, const char *const *needles)
{
	dvar_checkpoint_state s;
	int rc = dvar_checkpoint_state_parse(&s, text, strlen(text), "ckpt/checkpoint");
	if (rc != DVAR_ECORRUPT)
		fail_msg("expected DVAR_ECORRUPT, got %d for:\n%s", rc, text);
	assert_null(s.latest);
	assert_null(s.all);
	assert_int_equal(s.num_all, 0);
	tu_assert_error_contains("'ckpt/checkpoint'");
	for (size_t i = 0; needles[i]; i++)
		tu_assert_error_contains(needles[i]);
}

#define LIST(...) ((const char *const[]){ __VA_ARGS__, NULL })

static void test_format_state__accepted(void **state)
{
	(void)state;
	/* What tf.train.CheckpointManager writes. */
	parses("model_checkpoint_path: \"ckpt-2\"\n"
	       "all_model_checkpoint_paths: \"ckpt-1\"\n"
	       "all_model_checkpoint_paths: \"ckpt-2\"\n"
	       "all_model_checkpoint_timestamps: 1700000000.5\n"
	       "all_model_checkpoint_timestamps: 1700000100.25\n"
	       "last_preserved_timestamp: 1699999999.0\n",
	       "ckpt-2", LIST("ckpt-1", "ckpt-2"));
	/* No list at all; no final newline; CRLF line ends. */
	parses("model_checkpoint_path: \"a\"", "a", NULL);
	parses("model_checkpoint_path: \"a\"\r\nall_model_checkpoint_paths: \"a\"\r\n", "a",
	       LIST("a"));
	/* Comments anywhere, whitespace of every kind, or none between tokens. */
	parses("# written by hand\n\n  model_checkpoint_path  :\t\"x\"  # the latest\n"
	       "\v\fall_model_checkpoint_paths:\n\"x\"#no space\n",
	       "x", LIST("x"));
	parses("model_checkpoint_path:\"b\"all_model_checkpoint_paths:\"a\"all_model_checkpoint_paths:'b'"
	       "last_preserved_timestamp:1",
	       "b", LIST("a", "b"));
	/* Fields in any order; the last model_checkpoint_path wins. */
	parses("all_model_checkpoint_paths: \"c1\"\nlast_preserved_timestamp: 3\n"
	       "model_checkpoint_path: \"c0\"\nall_model_checkpoint_paths: \"c2\"\n"
	       "model_checkpoint_path: \"c2\"\n",
	       "c2", LIST("c1", "c2"));
	/* ',' or ';' after a value; list values of repeated fields, empty ones too. */
	parses("model_checkpoint_path: \"m\", all_model_checkpoint_paths: [\"k\", 'm'];"
	       "all_model_checkpoint_timestamps: [1.5, 2e3, -inf] all_model_checkpoint_paths: []",
	       "m", LIST("k", "m"));
	/* Either quote, C escapes, adjacent strings joined (across lines too). */
	parses("model_checkpoint_path: 'it''s' \"\\x2f\" 'x'\n", "its/x", NULL);
	parses("model_checkpoint_path: \"a\\\"b\\'c\\\\d\\?\"", "a\"b'c\\d?", NULL);
	parses("model_checkpoint_path: \"\\n\\t\\r\\a\\b\\f\\v|\"", "\n\t\r\a\b\f\v|", NULL);
	parses("model_checkpoint_path: \"\\163\\61\\0631\\x41\\x4a2\"", "s131AJ2", NULL);
	parses("model_checkpoint_path: \"ab\"\n  \"cd\" # joined\n 'ef'", "abcdef", NULL);
	parses("model_checkpoint_path: \"\\u00e9t\\u00e9\\U0001F600\"",
	       "\xc3\xa9t\xc3\xa9\xf0\x9f\x98\x80", NULL);
	/* UTF-8 as it is. */
	parses("model_checkpoint_path: \"r\xc3\xa9sum\xc3\xa9\"", "r\xc3\xa9sum\xc3\xa9", NULL);
	/* Absolute paths (TF1's Saver) are kept as written. */
	parses("model_checkpoint_path: \"/data/run/model.ckpt-10\"", "/data/run/model.ckpt-10", NULL);
	/* The numbers TensorFlow's parser takes for a double. */
	parses("model_checkpoint_path: \"n\"\nlast_preserved_timestamp: -12\n"
	       "all_model_checkpoint_timestamps: .5\nall_model_checkpoint_timestamps: 1.e5\n"
	       "all_model_checkpoint_timestamps: 1E-5\nall_model_checkpoint_timestamps: 2.5f\n"
	       "all_model_checkpoint_timestamps: 0x10\nall_model_checkpoint_timestamps: nan\n"
	       "all_model_checkpoint_timestamps: Infinity\nall_model_checkpoint_timestamps: -INF\n",
	       "n", NULL);
}

static void test_format_state__refused(void **state)
{
	(void)state;
	refused("model_checkpoint_path: ckpt-2\n",
	        LIST("line 1: model_checkpoint_path is not a quoted path"));
	refused("model_checkpoint_path: \"a\"\nall_model_checkpoint_paths: 7\n",
	        LIST("line 2: all_model_checkpoint_paths is not a quoted path"));
	refused("model_checkpoint_path: \"a\"\nbest_checkpoint: \"a\"\n",
	        LIST("line 2: unknown field 'best_checkpoint'", "model_checkpoint_path"));
	refused("\n\n# x\nmodel_checkpoint_path \"a\"\n", LIST("line 4: expected ':' after model_checkpoint_path"));
	refused("model_checkpoint_path: \"unterminated\n", LIST("line 1:", "does not end on its line"));
	refused("model_checkpoint_path: \"a\nb\"\n", LIST("does not end on its line"));
	refused("model_checkpoint_path: 'a\"", LIST("does not end on its line"));
	refused("model_checkpoint_path: \"\\q\"", LIST("invalid escape '\\q'"));
	refused("model_checkpoint_path: \"\\xzz\"", LIST("\\x without hex digits"));
	refused("model_checkpoint_path: \"\\u12\"", LIST("\\u needs 4 hex digits"));
	refused("model_checkpoint_path: \"\\ud800\"", LIST("which is no character"));
	refused("model_checkpoint_path: \"a\\000b\"", LIST("holds a NUL byte"));
	refused("model_checkpoint_path: \"a\"\nlast_preserved_timestamp: \"1\"\n",
	        LIST("line 2: last_preserved_timestamp is not a number"));
	refused("model_checkpoint_path: \"a\"\nlast_preserved_timestamp: 1.2.3\n",
	        LIST("last_preserved_timestamp is not a number"));
	refused("model_checkpoint_path: \"a\"\nlast_preserved_timestamp: soon\n",
	        LIST("last_preserved_timestamp is not a number"));
	refused("model_checkpoint_path: [\"a\"]\n", LIST("model_checkpoint_path is not a repeated field"));
	refused("model_checkpoint_path: \"a\"\nall_model_checkpoint_paths: [\"a\" \"b\"\n",
	        LIST("expected ',' or ']'"));
	refused("model_checkpoint_path: \"a\"\nall_model_checkpoint_paths: [\"a\",]\n",
	        LIST("all_model_checkpoint_paths is not a quoted path"));
	refused("model_checkpoint_path: \"a\" = \n", LIST("expected a field name, found '='"));
	refused("{model_checkpoint_path: \"a\"}", LIST("expected a field name, found '{'"));
	/* No latest: TensorFlow's get_checkpoint_state refuses it as well. */
	refused("all_model_checkpoint_paths: \"a\"\n", LIST("names no latest checkpoint"));
	refused("model_checkpoint_path: \"\"\n", LIST("names no latest checkpoint"));
	refused("# nothing\n", LIST("names no latest checkpoint"));
	refused("", LIST("names no latest checkpoint"));
	dvar_checkpoint_state s;
	assert_int_equal(dvar_checkpoint_state_parse(&s, "model_checkpoint_path: \"a\"\0", 27, "f"),
	                 DVAR_ECORRUPT);
	tu_assert_error_contains("NUL byte");
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_format_state__users(void **state)
{
	const char *dir = *state;
	dvar_checkpoint_state s;
	/* The public call: absent, read, refused. */
	assert_int_equal(dvar_checkpoint_state_read(&s, dir), DVAR_ENOTFOUND);
	assert_null(s.latest);
	char *p = tu_path(dir, "checkpoint");
	write_text(p, "all_model_checkpoint_paths: 'ckpt-1' # kept\n"
	              "model_checkpoint_path: \"ckpt-\" \"1\"\n");
	assert_int_equal(dvar_checkpoint_state_read(&s, dir), DVAR_OK);
	assert_string_equal(s.latest, "ckpt-1");
	assert_int_equal(s.num_all, 1);
	assert_string_equal(s.all[0], "ckpt-1");
	dvar_checkpoint_state_clear(&s);
	dvar_checkpoint_state_clear(NULL);
	/* A root reads the same text: its latest is the checkpoint written. */
	dvar_writer *w;
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.flags = DVAR_WRITE_NO_FSYNC;
	dvar_shape sh;
	dvar_shape_init(&sh, 1, (int64_t[]){ 2 });
	const float two[2] = { 4, 5 };
	char *ck = tu_path(dir, "ckpt-1");
	assert_int_equal(dvar_writer_open(&w, ck, &o), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "w", DVAR_FLOAT32, &sh, NULL, two), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	char *got;
	assert_int_equal(dvar_resolve_checkpoint(dir, &got), DVAR_OK);
	assert_string_equal(got, ck);
	free(got);
	dvar_root_list *l;
	dvar_root_entry e;
	assert_int_equal(dvar_root_list_open(&l, dir), DVAR_OK);
	assert_int_equal(dvar_root_list_count(l), 1);
	assert_int_equal(dvar_root_list_get(l, 0, &e), DVAR_OK);
	assert_true(e.is_latest && e.is_kept);
	dvar_root_list_free(l);
	/* The pointer file writes what the parser reads back. */
	char *names[2] = { "ckpt-0", "ckpt-1" };
	dvar_checkpoint_state out = { names[1], names, 2 };
	assert_int_equal(dvar_pointer_write(dir, &out, 1), DVAR_OK);
	assert_int_equal(dvar_pointer_read(&s, dir), DVAR_OK);
	assert_string_equal(s.latest, "ckpt-1");
	assert_int_equal(s.num_all, 2);
	assert_string_equal(s.all[0], "ckpt-0");
	dvar_checkpoint_state_clear(&s);
	/* A root's names are its directories: a path is refused there. */
	write_text(p, "model_checkpoint_path: \"../elsewhere/ckpt-1\"\n");
	assert_int_equal(dvar_pointer_read(&s, dir), DVAR_ECORRUPT);
	tu_assert_error_contains("names '../elsewhere/ckpt-1', which is not a checkpoint directory");
	write_text(p, "model_checkpoint_path: \"ckpt-1\"\nall_model_checkpoint_paths: \"..\"\n");
	assert_int_equal(dvar_pointer_read(&s, dir), DVAR_ECORRUPT);
	/* The reader reports a broken state file with its line. */
	write_text(p, "model_checkpoint_path: \"ckpt-1\"\nsome_field: 1\n");
	dvar_reader *r = NULL;
	assert_int_equal(dvar_reader_open(&r, dir, NULL), DVAR_ECORRUPT);
	tu_assert_error_contains("line 2: unknown field 'some_field'");
	assert_null(r);
	free(ck);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_state__accepted),
		cmocka_unit_test(test_format_state__refused),
		cmocka_unit_test_setup_teardown(test_format_state__users, tu_setup_dir, tu_teardown_dir),
	};
	return cmocka_run_group_tests_name("format/state", tests, NULL, NULL);
}
