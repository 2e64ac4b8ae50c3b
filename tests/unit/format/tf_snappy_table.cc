/*
 * tests/unit/format/tf_snappy_table.cc - a table written by LevelDB's own
 * TableBuilder with snappy compression, as TensorFlow 1.x wrote some
 * .index files (tf-behavior.md §4.10), for test_format_tf.c. C++ only
 * because LevelDB's table API is; the test stays C.
 */
#include <leveldb/env.h>
#include <leveldb/options.h>
#include <leveldb/table_builder.h>

#include <memory>

extern "C" int tu_write_snappy_table(const char *path, const unsigned char *const *keys,
                                     const size_t *klens, const unsigned char *const *vals,
                                     const size_t *vlens, size_t n)
{
	leveldb::WritableFile *f = nullptr;
	if (!leveldb::Env::Default()->NewWritableFile(path, &f).ok())
		return -1;
	std::unique_ptr<leveldb::WritableFile> file(f);
	leveldb::Options o;
	o.compression = leveldb::kSnappyCompression;
	o.block_size = 256 << 10;
	leveldb::TableBuilder b(o, f);
	for (size_t i = 0; i < n; i++)
		b.Add(leveldb::Slice((const char *)keys[i], klens[i]),
		      leveldb::Slice((const char *)vals[i], vlens[i]));
	if (!b.Finish().ok() || !file->Close().ok())
		return -1;
	return 0;
}
