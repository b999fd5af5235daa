//===- Safetensors.cpp - Reading and writing safetensors ------------------===//
//
// File layout: an 8-byte little-endian header length N, N bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}),
// then the data section; offsets are relative to the data section.
//
// The reader trusts nothing in the header: every number is range- and
// overflow-checked against the mapped size before any view is created, so a
// crafted file yields an error, never an out-of-bounds read.
//
//===----------------------------------------------------------------------===//
#include "runtime/io/Safetensors.h"

#include "runtime/io/AtomicFile.h"
#include "runtime/io/JsonCheck.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace k3 {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

constexpr const char *kMetadataKey = "__metadata__";
constexpr const char *kIndexFile = "model.safetensors.index.json";
constexpr const char *kSingleFile = "model.safetensors";
/// The official reader's bound on the header (safetensors MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100000000;

int64_t mtimeNs(const struct stat &st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
         st.st_mtim.tv_nsec;
}

std::string errnoText() { return std::strerror(errno); }

/// Reads a non-negative JSON integer that fits in uint64_t.
bool readU64(const json &v, uint64_t &out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

/// Checks one header entry and fills `view` (data pointer relative to the
/// data section start, resolved by the caller). `begin`/`end` are returned
/// for the overlap check.
Status parseEntry(const std::string &name, const json &entry, uint64_t dataSize,
                  TensorView &view, uint64_t &begin, uint64_t &end) {
  if (!entry.is_object())
    return makeError("tensor '", name, "': header entry is not an object");
  if (!entry.contains("dtype") || !entry.at("dtype").is_string())
    return makeError("tensor '", name, "': missing or non-string dtype");
  std::string dtype = entry.at("dtype").get<std::string>();
  if (!parseDType(dtype, view.dtype))
    return makeError("tensor '", name, "': unknown dtype '", dtype, "'");
  if (!entry.contains("shape") || !entry.at("shape").is_array())
    return makeError("tensor '", name, "': missing or non-array shape");
  view.shape.clear();
  for (const json &d : entry.at("shape")) {
    uint64_t dim = 0;
    if (!readU64(d, dim) ||
        dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return makeError("tensor '", name,
                       "': shape dimensions must be non-negative integers, "
                       "found ",
                       d.dump());
    view.shape.push_back(static_cast<int64_t>(dim));
  }
  if (!entry.contains("data_offsets") || !entry.at("data_offsets").is_array() ||
      entry.at("data_offsets").size() != 2)
    return makeError("tensor '", name,
                     "': data_offsets must be an array [begin, end]");
  const json &offsets = entry.at("data_offsets");
  if (!readU64(offsets.at(0), begin) || !readU64(offsets.at(1), end))
    return makeError("tensor '", name,
                     "': data_offsets must be non-negative integers, found ",
                     offsets.dump());
  if (begin > end)
    return makeError("tensor '", name, "': data_offsets begin ", begin,
                     " is after end ", end);
  if (end > dataSize)
    return makeError("tensor '", name, "': data_offsets [", begin, ", ", end,
                     "] run past the end of the data section (", dataSize,
                     " bytes; is the file truncated?): the shard is smaller "
                     "than its header says");
  Expected<uint64_t> bytes = tensorByteSize(view.dtype, view.shape);
  if (!bytes)
    return bytes.status().withContext("tensor '" + name + "'");
  // The element count must fit int64_t however the dimensions multiply
  // (TensorView::numel), even when a zero dimension makes the bytes 0.
  int64_t numel = 1;
  for (int64_t d : view.shape)
    if (__builtin_mul_overflow(numel, d, &numel))
      return makeError("tensor '", name, "': shape ", shapeText(view.shape),
                       " has more elements than fit 64 bits");
  if (*bytes != end - begin)
    return makeError("tensor '", name, "': ", dtype, " ", shapeText(view.shape),
                     " needs ", *bytes, " bytes but data_offsets span ",
                     end - begin);
  view.name = name;
  view.nbytes = static_cast<size_t>(end - begin);
  return Status::ok();
}

} // namespace

//===----------------------------------------------------------------------===//
// Sizes
//===----------------------------------------------------------------------===//

Expected<uint64_t> tensorByteSize(DType dtype,
                                  const std::vector<int64_t> &shape) {
  uint64_t n = dtypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0)
      return makeError("negative dimension ", d, " in shape ",
                       shapeText(shape));
    uint64_t next = 0;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &next))
      return makeError("byte size of shape ", shapeText(shape),
                       " overflows 64 bits");
    n = next;
  }
  return n;
}

//===----------------------------------------------------------------------===//
// SafetensorsFile
//===----------------------------------------------------------------------===//

SafetensorsFile::~SafetensorsFile() {
  if (map_)
    munmap(map_, mapSize_);
}

const TensorView *SafetensorsFile::find(const std::string &name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Expected<std::unique_ptr<SafetensorsFile>>
SafetensorsFile::open(const std::string &path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  auto fail = [&](const Status &s) { return s.withContext(path); };

  // O_NONBLOCK: a FIFO is refused below instead of blocking the open.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return fail(makeError("cannot open: ", errnoText()));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    Status s = makeError("cannot stat: ", errnoText());
    ::close(fd);
    return fail(s);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(makeError("not a regular file"));
  }
  uint64_t fileSize = static_cast<uint64_t>(st.st_size);
  file->mtimeNs_ = mtimeNs(st);
  if (fileSize < 8) {
    ::close(fd);
    return fail(makeError("file is ", fileSize,
                          " bytes, shorter than the 8-byte header length"));
  }
  void *map = mmap(nullptr, fileSize, PROT_READ, MAP_PRIVATE, fd, 0);
  int mapErrno = errno;
  ::close(fd);
  if (map == MAP_FAILED) {
    errno = mapErrno;
    return fail(makeError("cannot map: ", errnoText()));
  }
  file->map_ = map;
  file->mapSize_ = fileSize;
  const uint8_t *bytes = static_cast<const uint8_t *>(map);

  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i)
    headerLen = (headerLen << 8) | bytes[i];
  if (headerLen > fileSize - 8)
    return fail(makeError("header length ", headerLen, " exceeds the file (",
                          fileSize, " bytes, 8 of them the length itself)"));
  if (headerLen > kMaxHeaderBytes)
    return fail(makeError("header length ", headerLen, " exceeds the limit of ",
                          kMaxHeaderBytes, " bytes"));

  // Depth and duplicate tensor names before the tree parser, which would
  // keep only the last of two entries with one name.
  Status structure = checkJsonText(std::string_view(
      reinterpret_cast<const char *>(bytes + 8), headerLen));
  if (!structure)
    return fail(structure.withContext("header"));
  json header;
  try {
    header = json::parse(bytes + 8, bytes + 8 + headerLen);
  } catch (const std::exception &e) {
    return fail(makeError("header is not valid JSON: ", e.what()));
  }
  if (!header.is_object())
    return fail(makeError("header is not a JSON object"));

  const uint8_t *data = bytes + 8 + headerLen;
  uint64_t dataSize = fileSize - 8 - headerLen;
  struct Range {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  try {
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == kMetadataKey) {
        if (!it.value().is_object())
          return fail(makeError("__metadata__ is not an object"));
        for (auto m = it.value().begin(); m != it.value().end(); ++m) {
          if (!m.value().is_string())
            return fail(makeError("__metadata__ value of '", m.key(),
                                  "' is not a string"));
          file->metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      TensorView view;
      uint64_t begin = 0, end = 0;
      Status s = parseEntry(it.key(), it.value(), dataSize, view, begin, end);
      if (!s)
        return fail(s);
      view.data = data + begin;
      ranges.push_back({begin, end, file->tensors_.size()});
      file->tensors_.push_back(std::move(view));
    }
  } catch (const std::exception &e) {
    return fail(makeError("malformed header: ", e.what()));
  }

  // No two tensors may share a byte (empty tensors share nothing).
  std::sort(ranges.begin(), ranges.end(), [](const Range &a, const Range &b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Range *prev = nullptr;
  for (const Range &r : ranges) {
    if (r.begin == r.end)
      continue;
    if (prev && r.begin < prev->end)
      return fail(makeError("tensors '", file->tensors_[prev->index].name,
                            "' [", prev->begin, ", ", prev->end, ") and '",
                            file->tensors_[r.index].name, "' [", r.begin, ", ",
                            r.end, ") overlap"));
    prev = &r;
  }

  // Keep the tensors in file order: stable across runs and the order a
  // sequential reader would touch the pages in.
  std::stable_sort(file->tensors_.begin(), file->tensors_.end(),
                   [&](const TensorView &a, const TensorView &b) {
                     return a.data < b.data;
                   });
  for (size_t i = 0; i < file->tensors_.size(); ++i)
    file->index_[file->tensors_[i].name] = i;
  return file;
}

//===----------------------------------------------------------------------===//
// TensorStore
//===----------------------------------------------------------------------===//

Status SafetensorsFile::checkUnchanged() const {
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0)
    return makeError(path_, ": the shard is gone since it was opened: ",
                     errnoText());
  if (static_cast<uint64_t>(st.st_size) < mapSize_)
    return makeError(path_, ": the shard shrank from ", mapSize_, " to ",
                     st.st_size,
                     " bytes since it was opened (truncated while in use; "
                     "reading it now would crash with SIGBUS)");
  if (static_cast<uint64_t>(st.st_size) != mapSize_ ||
      mtimeNs(st) != mtimeNs_)
    return makeError(path_, ": the shard was modified since it was opened; "
                            "reopen the checkpoint");
  return Status::ok();
}

Status TensorStore::checkUnchanged() const {
  for (const auto &f : files_)
    K3_RETURN_IF_ERROR(f->checkUnchanged());
  return Status::ok();
}

/// The made tensors of a store: the maker, its specs by name, and the
/// tensors made so far (a view and the bytes it points at, each).
struct TensorStore::Made {
  std::shared_ptr<const TensorMaker> maker;
  std::map<std::string, size_t> byName;
  struct Tensor {
    TensorView view;
    std::unique_ptr<uint8_t[]> bytes;
  };
  std::mutex mutex;
  std::map<size_t, Tensor> held;
  /// The drawn specs' views (deferringDrawn), their bytes in `reserved`:
  /// address space reserved without access. Built once, read-only after.
  bool deferredBuilt = false;
  void *reserved = nullptr;
  size_t reservedBytes = 0;
  std::map<size_t, TensorView> deferred;       ///< spec -> view
  std::map<uint64_t, size_t> deferredByOffset; ///< first byte -> spec

  ~Made() {
    if (reserved)
      ::munmap(reserved, reservedBytes);
  }

  /// Builds the deferred views once; false when there are none (no drawn
  /// spec, or the reservation failed: then everything is made).
  bool buildDeferred() {
    std::lock_guard<std::mutex> lock(mutex);
    if (deferredBuilt)
      return reserved != nullptr;
    deferredBuilt = true;
    std::vector<std::pair<size_t, uint64_t>> at; // spec, offset
    uint64_t total = 0;
    for (size_t i = 0; i < maker->specs().size(); ++i) {
      if (!maker->drawn(i))
        continue;
      const TensorSpec &s = maker->specs()[i];
      at.emplace_back(i, total);
      // 256-byte aligned starts, as a device allocation's, and at least a
      // byte between two tensors (an empty one has an address of its own).
      total += (*tensorByteSize(s.dtype, s.shape) + 256) / 256 * 256;
    }
    if (at.empty())
      return false;
    void *p = ::mmap(nullptr, total, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      return false;
    reserved = p;
    reservedBytes = total;
    for (const auto &[i, offset] : at) {
      const TensorSpec &s = maker->specs()[i];
      TensorView v;
      v.name = s.name;
      v.dtype = s.dtype;
      v.shape = s.shape;
      v.nbytes = static_cast<size_t>(*tensorByteSize(s.dtype, s.shape));
      v.data = static_cast<const uint8_t *>(reserved) + offset;
      deferred.emplace(i, std::move(v));
      deferredByOffset.emplace(offset, i);
    }
    return true;
  }

  const TensorView *findDeferred(const std::string &name) {
    auto it = byName.find(name);
    if (it != byName.end()) {
      auto d = deferred.find(it->second);
      if (d != deferred.end())
        return &d->second;
    }
    return find(name);
  }

  std::optional<std::pair<DrawnTensor, uint64_t>> drawnAt(const void *p) {
    const auto *b = static_cast<const uint8_t *>(reserved);
    const auto *q = static_cast<const uint8_t *>(p);
    if (!b || q < b || q >= b + reservedBytes)
      return std::nullopt;
    const uint64_t offset = static_cast<uint64_t>(q - b);
    auto it = deferredByOffset.upper_bound(offset);
    --it; // offset 0 is the first entry's
    const TensorView &v = deferred.at(it->second);
    const uint64_t within = offset - it->first;
    if (within >= v.nbytes)
      return std::nullopt; // the alignment gap after a tensor
    DrawnTensor d = *maker->drawn(it->second);
    d.bytes = v.nbytes;
    return std::make_pair(d, within);
  }

  const TensorView *find(const std::string &name) {
    auto it = byName.find(name);
    if (it == byName.end())
      return nullptr;
    std::lock_guard<std::mutex> lock(mutex);
    auto h = held.find(it->second);
    if (h != held.end())
      return &h->second.view;
    const std::vector<size_t> group = maker->group(it->second);
    std::vector<uint8_t *> dst;
    for (size_t i : group) {
      const TensorSpec &s = maker->specs()[i];
      Tensor t;
      t.view.name = s.name;
      t.view.dtype = s.dtype;
      t.view.shape = s.shape;
      // Sizes were checked when the store was made.
      t.view.nbytes = static_cast<size_t>(*tensorByteSize(s.dtype, s.shape));
      t.bytes.reset(new uint8_t[t.view.nbytes ? t.view.nbytes : 1]);
      t.view.data = t.bytes.get();
      dst.push_back(t.bytes.get());
      held[i] = std::move(t);
    }
    maker->make(it->second, dst);
    return &held[it->second].view;
  }
};

TensorStore TensorStore::made(std::shared_ptr<const TensorMaker> maker) {
  TensorStore store;
  store.made_ = std::make_shared<Made>();
  for (size_t i = 0; i < maker->specs().size(); ++i)
    store.made_->byName.emplace(maker->specs()[i].name, i);
  store.made_->maker = std::move(maker);
  return store;
}

void TensorStore::releaseMade() const {
  if (!made_)
    return;
  std::lock_guard<std::mutex> lock(made_->mutex);
  made_->held.clear();
}

size_t TensorStore::size() const {
  return made_ ? made_->byName.size() : index_.size();
}

TensorStore TensorStore::deferringDrawn() const {
  TensorStore copy = *this;
  copy.deferDrawn_ = made_ && made_->buildDeferred();
  return copy;
}

std::optional<std::pair<DrawnTensor, uint64_t>>
TensorStore::drawnAt(const void *p) const {
  if (!made_)
    return std::nullopt;
  return made_->drawnAt(p);
}

const TensorView *TensorStore::find(const std::string &name) const {
  if (made_)
    return deferDrawn_ ? made_->findDeferred(name) : made_->find(name);
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<const TensorView *> TensorStore::all() const {
  std::vector<const TensorView *> out;
  if (made_) {
    for (const TensorSpec &s : made_->maker->specs())
      out.push_back(find(s.name));
    return out;
  }
  out.reserve(index_.size());
  for (const auto &f : files_)
    for (const TensorView &t : f->tensors())
      out.push_back(&t);
  return out;
}

Expected<TensorStore> TensorStore::open(const std::string &path) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st))
    return makeError(path, ": no such file or directory");

  std::vector<std::string> files;
  // Index checks to run once the shards are open: name -> shard path.
  std::vector<std::pair<std::string, std::string>> indexed;
  if (fs::is_regular_file(st)) {
    files.push_back(path);
  } else if (fs::is_directory(st)) {
    fs::path dir(path);
    if (fs::exists(dir / kIndexFile, ec)) {
      std::string indexPath = (dir / kIndexFile).string();
      std::string text;
      K3_RETURN_IF_ERROR(readRegularFile(indexPath, kMaxIndexFileBytes, text,
                                         "shard index"));
      K3_RETURN_IF_ERROR(checkJsonText(text).withContext(indexPath));
      json index;
      try {
        index = json::parse(text);
      } catch (const std::exception &e) {
        return makeError(indexPath, ": invalid JSON: ", e.what());
      }
      if (!index.is_object() || !index.contains("weight_map") ||
          !index.at("weight_map").is_object())
        return makeError(indexPath, ": weight_map is missing or not an object");
      std::set<std::string> shards;
      for (auto it = index.at("weight_map").begin();
           it != index.at("weight_map").end(); ++it) {
        if (!it.value().is_string())
          return makeError(indexPath, ": weight_map entry '", it.key(),
                           "' is not a file name");
        std::string shard = it.value().get<std::string>();
        // Shards are plain names inside the directory; anything else could
        // make a checkpoint read files outside it.
        if (shard.empty() || shard.find('/') != std::string::npos ||
            shard == "." || shard == "..")
          return makeError(indexPath, ": weight_map entry '", it.key(),
                           "' names '", shard,
                           "', which is not a file in the model directory");
        std::string shardPath = (dir / shard).string();
        if (!shards.count(shardPath)) {
          if (!fs::is_regular_file(shardPath, ec))
            return makeError(indexPath, ": shard '", shard, "' (for tensor '",
                             it.key(), "') does not exist");
          shards.insert(shardPath);
          files.push_back(shardPath);
        }
        indexed.emplace_back(it.key(), shardPath);
      }
      if (files.empty())
        return makeError(indexPath, ": weight_map is empty");
    } else if (fs::is_regular_file(dir / kSingleFile, ec)) {
      files.push_back((dir / kSingleFile).string());
    } else {
      for (const fs::directory_entry &e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".safetensors" && e.is_regular_file(ec))
          files.push_back(e.path().string());
      if (ec)
        return makeError(path, ": cannot list the directory: ", ec.message());
      std::sort(files.begin(), files.end());
    }
    if (files.empty())
      return makeError(path, ": no ", kIndexFile, ", ", kSingleFile,
                       " or *.safetensors file in this directory");
  } else {
    return makeError(path, ": neither a file nor a directory");
  }

  TensorStore store;
  std::map<std::string, std::string> owner;
  for (const std::string &f : files) {
    Expected<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::open(f);
    if (!file)
      return file.status();
    std::shared_ptr<SafetensorsFile> shared(file.take());
    for (const TensorView &t : shared->tensors()) {
      auto [it, inserted] = store.index_.emplace(t.name, &t);
      if (!inserted)
        return makeError("tensor '", t.name, "' appears in both ",
                         owner[t.name], " and ", f);
      owner[t.name] = f;
    }
    store.files_.push_back(std::move(shared));
  }
  for (const auto &[name, shardPath] : indexed) {
    auto it = owner.find(name);
    if (it == owner.end() || it->second != shardPath)
      return makeError(path, "/", kIndexFile, ": tensor '", name,
                       "' is not in its shard ", shardPath);
  }
  return store;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

SafetensorsWriter::~SafetensorsWriter() {
  if (file_)
    std::fclose(static_cast<std::FILE *>(file_));
  if (!finished_ && !path_.empty())
    std::remove(path_.c_str());
}

Expected<std::unique_ptr<SafetensorsWriter>>
SafetensorsWriter::create(const std::string &path,
                          const std::vector<TensorSpec> &specs,
                          const std::map<std::string, std::string> &metadata) {
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto &[k, v] : metadata)
      meta[k] = v;
    header[kMetadataKey] = meta;
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const TensorSpec &s : specs) {
    if (s.name == kMetadataKey || !names.insert(s.name).second)
      return makeError(path, ": tensor name '", s.name,
                       "' is reserved or used twice");
    Expected<uint64_t> bytes = tensorByteSize(s.dtype, s.shape);
    if (!bytes)
      return bytes.status().withContext(path + ": tensor '" + s.name + "'");
    header[s.name] = {{"dtype", dtypeName(s.dtype)},
                      {"shape", s.shape},
                      {"data_offsets", {offset, offset + *bytes}}};
    w->sizes_.push_back(*bytes);
    offset += *bytes;
  }
  std::string text = header.dump();
  // Pad with spaces (valid JSON whitespace) so the data section starts on an
  // 8-byte boundary.
  while ((8 + text.size()) % 8 != 0)
    text.push_back(' ');

  std::FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return makeError(path, ": cannot create: ", errnoText());
  w->file_ = f;
  w->path_ = path;
  w->specs_ = specs;
  w->fileSize_ = 8 + text.size() + offset;
  uint8_t len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(n >> (8 * i));
  if (std::fwrite(len, 1, 8, f) != 8 ||
      std::fwrite(text.data(), 1, text.size(), f) != text.size())
    return makeError(path, ": write error: ", errnoText());
  return w;
}

Status SafetensorsWriter::writeNext(const void *data, size_t nbytes) {
  if (next_ >= specs_.size())
    return makeError(path_, ": more tensors written than the header names");
  const TensorSpec &s = specs_[next_];
  if (doneInNext_ != 0 || nbytes != sizes_[next_])
    return makeError(path_, ": tensor '", s.name, "' ", dtypeName(s.dtype), " ",
                     shapeText(s.shape), " needs ", sizes_[next_],
                     " bytes, got ", nbytes,
                     doneInNext_ ? " after a partial append" : "");
  if (nbytes == 0) { // an empty tensor: nothing to write, just move on
    ++next_;
    return Status::ok();
  }
  return append(data, nbytes);
}

Status SafetensorsWriter::append(const void *data, size_t nbytes) {
  std::FILE *f = static_cast<std::FILE *>(file_);
  if (!f)
    return makeError(path_, ": write after finish");
  uint64_t left = nbytes;
  while (left > 0) {
    // Skip empty tensors, then account the bytes against the current one.
    while (next_ < specs_.size() && doneInNext_ == sizes_[next_]) {
      ++next_;
      doneInNext_ = 0;
    }
    if (next_ >= specs_.size())
      return makeError(path_, ": ", left,
                       " bytes written past the last tensor");
    uint64_t take = std::min(left, sizes_[next_] - doneInNext_);
    doneInNext_ += take;
    left -= take;
  }
  if (nbytes && std::fwrite(data, 1, nbytes, f) != nbytes)
    return makeError(path_, ": write error: ", errnoText());
  // Move past a tensor that is now complete, so writeNext sees a clean start
  // (but not past following empty tensors, which writeNext still expects).
  if (next_ < specs_.size() && sizes_[next_] > 0 &&
      doneInNext_ == sizes_[next_]) {
    ++next_;
    doneInNext_ = 0;
  }
  return Status::ok();
}

Status SafetensorsWriter::finish() {
  if (!file_)
    return makeError(path_, ": finish called twice");
  // Trailing empty tensors need no bytes.
  while (next_ < specs_.size() && doneInNext_ == 0 && sizes_[next_] == 0)
    ++next_;
  if (next_ != specs_.size())
    return makeError(path_, ": only ", next_, " of ", specs_.size(),
                     " tensors were written");
  std::FILE *f = static_cast<std::FILE *>(file_);
  file_ = nullptr;
  if (std::fclose(f) != 0)
    return makeError(path_, ": close failed: ", errnoText());
  finished_ = true;
  return Status::ok();
}

Status writeSafetensors(const std::string &path,
                        const std::vector<TensorData> &tensors,
                        const std::map<std::string, std::string> &metadata) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const TensorData &t : tensors)
    specs.push_back({t.name, t.dtype, t.shape});
  Expected<std::unique_ptr<SafetensorsWriter>> w =
      SafetensorsWriter::create(path, specs, metadata);
  if (!w)
    return w.status();
  for (const TensorData &t : tensors)
    K3_RETURN_IF_ERROR((*w)->writeNext(t.bytes.data(), t.bytes.size()));
  return (*w)->finish();
}

} // namespace k3
