/*
 * format/index.cc - the checkpoint index as one immutable LevelDB table,
 * written with LevelDB's TableBuilder and read with its Table reader (the
 * container TensorFlow uses for .index files), behind a C interface. The
 * only C++ in libdvar; nothing LevelDB leaves this file.
 */
#include <leveldb/env.h>
#include <leveldb/iterator.h>
#include <leveldb/options.h>
#include <leveldb/table.h>
#include <leveldb/table_builder.h>

#include <cstdlib>
#include <memory>
#include <new>
#include <string>

#include "format/format.h"

struct dvar_index_builder {
	std::string path;
	std::unique_ptr<leveldb::WritableFile> file;
	leveldb::Options options;
	std::unique_ptr<leveldb::TableBuilder> table;
	bool closed = false; /* Finish or Abandon was called */
	bool broken = false; /* a call threw: the table is in no known state */
};

static int index_error(int code, const char *op, const std::string &path, const leveldb::Status &s)
{
	return dvar_error_set(code, "index '%s': %s: %s", path.c_str(), op, s.ToString().c_str());
}

/* body() behind the C interface: LevelDB and the standard library say they
 * ran out of memory by throwing, and no exception may leave this file. A
 * builder whose call threw is broken: later calls fail. */
template <typename Body> static int guarded(const char *path, bool *broken, Body body)
{
	try {
		if (broken && *broken)
			return dvar_error_set(DVAR_EIO, "index '%s': an earlier call failed", path);
		return body();
	} catch (const std::bad_alloc &) {
		if (broken)
			*broken = true;
		return dvar_error_set(DVAR_ENOMEM, "index '%s': out of memory", path);
	} catch (const std::exception &e) {
		if (broken)
			*broken = true;
		return dvar_error_set(DVAR_ERROR, "index '%s': %s", path, e.what());
	}
}

extern "C" int dvar_index_builder_open(dvar_index_builder **out, const char *path)
{
	*out = nullptr;
	std::unique_ptr<dvar_index_builder> b;
	return guarded(path, nullptr, [&] {
		b.reset(new dvar_index_builder());
		b->path = path;
		leveldb::WritableFile *f = nullptr;
		leveldb::Status s = leveldb::Env::Default()->NewWritableFile(path, &f);
		if (!s.ok())
			return index_error(DVAR_EIO, "create", path, s);
		b->file.reset(f);
		/* Uncompressed 256 KiB blocks, restarts every 16 keys (LevelDB's
		 * default): TensorFlow's TableBuilderOptions for its bundles. */
		b->options.compression = leveldb::kNoCompression;
		b->options.block_size = DVAR_INDEX_BLOCK_SIZE;
		b->table.reset(new leveldb::TableBuilder(b->options, f));
		*out = b.release();
		return (int)DVAR_OK;
	});
}

extern "C" int dvar_index_builder_add(dvar_index_builder *b, const void *key, size_t klen,
                                      const void *val, size_t vlen)
{
	return guarded(b->path.c_str(), &b->broken, [&] {
		b->table->Add(leveldb::Slice((const char *)key, klen),
		              leveldb::Slice((const char *)val, vlen));
		if (!b->table->status().ok())
			return index_error(DVAR_EIO, "add", b->path, b->table->status());
		return (int)DVAR_OK;
	});
}

extern "C" int dvar_index_builder_flush(dvar_index_builder *b)
{
	return guarded(b->path.c_str(), &b->broken, [&] {
		b->table->Flush();
		if (!b->table->status().ok())
			return index_error(DVAR_EIO, "flush", b->path, b->table->status());
		return (int)DVAR_OK;
	});
}

extern "C" int dvar_index_builder_finish(dvar_index_builder *b, int sync)
{
	return guarded(b->path.c_str(), &b->broken, [&] {
		/* Finish flushes the last block, then marks the table closed and
		 * allocates more. Flushed first, a throw inside Finish comes after
		 * that mark: Abandon, which asserts it unset, must not follow. */
		b->table->Flush();
		if (!b->table->status().ok())
			return index_error(DVAR_EIO, "finish", b->path, b->table->status());
		b->closed = true;
		leveldb::Status s = b->table->Finish();
		if (!s.ok())
			return index_error(DVAR_EIO, "finish", b->path, s);
		if (sync && !(s = b->file->Sync()).ok())
			return index_error(DVAR_EIO, "fsync", b->path, s);
		if (!(s = b->file->Close()).ok())
			return index_error(DVAR_EIO, "close", b->path, s);
		return (int)DVAR_OK;
	});
}

extern "C" void dvar_index_builder_free(dvar_index_builder *b)
{
	if (!b)
		return;
	/* A TableBuilder must be finished or abandoned before it is destroyed. */
	if (b->table && !b->closed)
		b->table->Abandon();
	delete b;
}

/*
 * A table read whole into memory, for LevelDB's Table: blocks are served in
 * place. The file is read with the library's own reads rather than mapped,
 * so an I/O error, or a file cut short while it is read, is an error naming
 * it (never a SIGBUS), and an interrupted or short read is taken up again.
 */
class BytesFile : public leveldb::RandomAccessFile
{
  public:
	BytesFile(const char *bytes, size_t len) : bytes_(bytes), len_(len)
	{
	}
	leveldb::Status Read(uint64_t off, size_t n, leveldb::Slice *result, char *) const override
	{
		if (off > len_)
			return leveldb::Status::Corruption("read past the end of the table");
		*result = leveldb::Slice(bytes_ + off, n < len_ - off ? n : len_ - off);
		return leveldb::Status::OK();
	}

  private:
	const char *bytes_;
	size_t len_;
};

extern "C" int dvar_index_scan_bytes(const char *path, const void *bytes, size_t len,
                                     dvar_index_visit_fn fn, void *ud)
{
	/* A table ends in a 48-byte footer; anything shorter is damage, not an I/O problem. */
	if (len < 48)
		return dvar_error_set(DVAR_ECORRUPT, "index '%s' is %zu bytes, too short to be a table",
		                      path, len);
	BytesFile file((const char *)bytes, len);
	return guarded(path, nullptr, [&] {
		leveldb::Options options;
		options.paranoid_checks = true;
		leveldb::Table *table = nullptr;
		leveldb::Status s = leveldb::Table::Open(options, &file, len, &table);
		if (!s.ok())
			return index_error(DVAR_ECORRUPT, "not a readable table", path, s);
		std::unique_ptr<leveldb::Table> owner(table);

		leveldb::ReadOptions ro;
		ro.verify_checksums = true;
		ro.fill_cache = false;
		std::unique_ptr<leveldb::Iterator> it(table->NewIterator(ro));
		int rc = DVAR_OK;
		for (it->SeekToFirst(); it->Valid() && rc == DVAR_OK; it->Next()) {
			leveldb::Slice k = it->key(), v = it->value();
			rc = fn(ud, k.data(), k.size(), v.data(), v.size());
		}
		if (rc == DVAR_OK && !it->status().ok())
			rc = index_error(DVAR_ECORRUPT, "read", path, it->status());
		return rc;
	});
}

extern "C" int dvar_index_scan(const char *path, dvar_index_visit_fn fn, void *ud)
{
	char *bytes = nullptr;
	size_t len = 0;
	int rc = dvar_fs_read_file(path, &bytes, &len, DVAR_INDEX_MAX);
	if (rc == DVAR_OK)
		rc = dvar_index_scan_bytes(path, bytes, len, fn, ud);
	free(bytes);
	return rc;
}
