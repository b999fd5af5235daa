//===- SnapshotFile.cpp - Prefix snapshots as files -----------------------===//
//
// Every field is written byte by byte, little-endian, so the format does not
// depend on the host. The header is checked (magic, version, its own CRC,
// the plan identity, the layout against the plan) before anything it
// describes is trusted: the sizes it implies come from the plan, never from
// the file alone, so a crafted header cannot make the reader allocate more
// than the plan's own state.
//
//===----------------------------------------------------------------------===//
#include "tools/k3-run/SnapshotFile.h"

#include "runtime/io/AtomicFile.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace k3 {

namespace {

constexpr char kMagic[8] = {'K', '3', 'C', 'S', 'N', 'A', 'P', '\n'};

void putU32(std::string &out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void putU64(std::string &out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t getU32(const char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
uint64_t getU64(const char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

std::string hex64(uint64_t v) {
  char b[20];
  std::snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(v));
  return b;
}

/// The payload bytes of an `n`-token snapshot of `plan`.
uint64_t payloadBytes(const PlanDoc &plan, uint64_t n) {
  uint64_t bytes = 8 * n + 8 * plan.states.size() +
                   4 * static_cast<uint64_t>(plan.config.vocabSize);
  for (const PlanState &s : plan.states)
    bytes += s.bytes;
  return bytes;
}

/// What a checked header says.
struct Header {
  uint64_t tokens = 0;
  uint64_t payload = 0;
  uint64_t total() const { return kSnapshotHeaderBytes + payload + 4; }
};

/// Checks the first `size` bytes of a snapshot as far as the header goes.
Expected<Header> parseHeader(const char *p, uint64_t size, const PlanDoc &plan,
                             uint64_t planId, const std::string &origin) {
  auto err = [&](const std::string &m) {
    return Status::error(origin + ": " + m);
  };
  if (std::memcmp(p, kMagic, std::min<uint64_t>(size, 8)) != 0 || size == 0)
    return err("not a k3 prefix snapshot (no K3CSNAP magic); snapshots are "
               "made by k3-run --snapshot-out");
  if (size < kSnapshotHeaderBytes)
    return err("the snapshot is truncated: " + std::to_string(size) +
               " bytes, shorter than its " +
               std::to_string(kSnapshotHeaderBytes) + "-byte header");
  const uint32_t version = getU32(p + 8);
  if (version != kSnapshotVersion)
    return err("snapshot version " + std::to_string(version) +
               " is not supported (this k3-run reads version " +
               std::to_string(kSnapshotVersion) +
               "); make the snapshot again with this k3-run");
  const uint32_t headerCrc = getU32(p + 48);
  if (crc32(p, 48) != headerCrc)
    return err("the snapshot header is corrupted (checksum mismatch)");
  const uint64_t id = getU64(p + 16);
  if (id != planId)
    return err("the snapshot was made with another plan (plan identity " +
               hex64(id) + ", this plan's is " + hex64(planId) +
               "); make it again with this plan (--snapshot-out)");
  const uint32_t states = getU32(p + 12);
  Header h;
  h.tokens = getU64(p + 24);
  const uint64_t vocab = getU64(p + 32);
  h.payload = getU64(p + 40);
  const uint64_t maxTokens = static_cast<uint64_t>(plan.maxSeq) - 1;
  if (states != plan.states.size() ||
      vocab != static_cast<uint64_t>(plan.config.vocabSize) || h.tokens < 1 ||
      h.tokens > maxTokens || h.payload != payloadBytes(plan, h.tokens))
    return err(
        "the snapshot's layout (" + std::to_string(states) + " states, vocab " +
        std::to_string(vocab) + ", " + std::to_string(h.tokens) + " tokens, " +
        std::to_string(h.payload) + " payload bytes) is not this plan's (" +
        std::to_string(plan.states.size()) + " states, vocab " +
        std::to_string(plan.config.vocabSize) + ", 1.." +
        std::to_string(maxTokens) + " tokens)");
  return h;
}

Status checkSize(uint64_t size, const Header &h, const std::string &origin) {
  if (size < h.total())
    return makeError(origin, ": the snapshot is truncated: ", size,
                     " bytes of the ", h.total(), " its header describes");
  if (size > h.total())
    return makeError(origin, ": the snapshot is corrupted: ", size - h.total(),
                     " bytes after the ", h.total(), " its header describes");
  return Status::ok();
}

} // namespace

uint64_t planIdentity(const std::string &planBytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : planBytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

Expected<std::string> serializeSnapshot(const PrefixSnapshot &snap,
                                        const PlanDoc &plan, uint64_t planId) {
  if (snap.states.size() != plan.states.size() ||
      snap.logits.size() != static_cast<size_t>(plan.config.vocabSize) ||
      snap.tokens.empty())
    return makeError("the prefix snapshot does not fit the plan (",
                     snap.states.size(), " states, ", snap.logits.size(),
                     " logits, ", snap.tokens.size(), " tokens)");
  for (size_t i = 0; i < plan.states.size(); ++i)
    if (snap.states[i].size() != plan.states[i].bytes)
      return makeError("the prefix snapshot's state '", plan.states[i].name,
                       "' has ", snap.states[i].size(), " bytes, the plan's ",
                       plan.states[i].bytes);
  const uint64_t payload = payloadBytes(plan, snap.tokens.size());
  std::string out;
  out.reserve(kSnapshotHeaderBytes + payload + 4);
  out.append(kMagic, 8);
  putU32(out, kSnapshotVersion);
  putU32(out, static_cast<uint32_t>(plan.states.size()));
  putU64(out, planId);
  putU64(out, snap.tokens.size());
  putU64(out, static_cast<uint64_t>(plan.config.vocabSize));
  putU64(out, payload);
  putU32(out, crc32(out.data(), out.size()));
  for (int64_t t : snap.tokens)
    putU64(out, static_cast<uint64_t>(t));
  for (const std::vector<uint8_t> &s : snap.states)
    putU64(out, s.size());
  for (const std::vector<uint8_t> &s : snap.states)
    out.append(reinterpret_cast<const char *>(s.data()), s.size());
  for (float f : snap.logits) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    putU32(out, bits);
  }
  putU32(out, crc32(out.data() + kSnapshotHeaderBytes,
                    out.size() - kSnapshotHeaderBytes));
  return out;
}

Expected<PrefixSnapshot> parseSnapshot(const std::string &bytes,
                                       const PlanDoc &plan, uint64_t planId,
                                       const std::string &origin) {
  Expected<Header> h =
      parseHeader(bytes.data(), bytes.size(), plan, planId, origin);
  if (!h)
    return h.status();
  K3_RETURN_IF_ERROR(checkSize(bytes.size(), *h, origin));
  const char *p = bytes.data() + kSnapshotHeaderBytes;
  if (crc32(p, h->payload) != getU32(p + h->payload))
    return makeError(origin, ": the snapshot is corrupted (payload checksum "
                             "mismatch)");

  PrefixSnapshot snap;
  snap.tokens.resize(h->tokens);
  for (int64_t &t : snap.tokens) {
    t = static_cast<int64_t>(getU64(p));
    p += 8;
    if (t < 0 || t >= plan.config.vocabSize)
      return makeError(origin, ": snapshot token ", &t - snap.tokens.data(),
                       " has id ", t, ", outside the vocabulary [0, ",
                       plan.config.vocabSize, ")");
  }
  for (const PlanState &s : plan.states) {
    const uint64_t size = getU64(p);
    p += 8;
    if (size != s.bytes)
      return makeError(origin, ": the snapshot's state '", s.name, "' has ",
                       size, " bytes, this plan's has ", s.bytes);
  }
  snap.states.resize(plan.states.size());
  for (size_t i = 0; i < plan.states.size(); ++i) {
    snap.states[i].assign(reinterpret_cast<const uint8_t *>(p),
                          reinterpret_cast<const uint8_t *>(p) +
                              plan.states[i].bytes);
    p += plan.states[i].bytes;
  }
  snap.logits.resize(static_cast<size_t>(plan.config.vocabSize));
  for (float &f : snap.logits) {
    const uint32_t bits = getU32(p);
    std::memcpy(&f, &bits, 4);
    p += 4;
  }
  return snap;
}

Status writeSnapshotFile(const std::string &path, const PrefixSnapshot &snap,
                         const PlanDoc &plan, uint64_t planId,
                         const std::vector<std::string> &inputs) {
  Expected<std::string> bytes = serializeSnapshot(snap, plan, planId);
  if (!bytes)
    return bytes.status().withContext(path);
  OutputOptions opt;
  opt.inputs = inputs;
  return writeFileAtomic(path, *bytes, opt);
}

Expected<PrefixSnapshot> readSnapshotFile(const std::string &path,
                                          const PlanDoc &plan,
                                          uint64_t planId) {
  // The header alone first, from a regular file only (readRegularFile
  // gives the message for anything else, and never blocks on a FIFO).
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  std::string bytes;
  if (ec || !std::filesystem::is_regular_file(st)) {
    K3_RETURN_IF_ERROR(readRegularFile(path, 0, bytes, "snapshot file"));
    return makeError(path, ": cannot read the snapshot file");
  }
  const uint64_t size = std::filesystem::file_size(path, ec);
  char head[kSnapshotHeaderBytes] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(head, sizeof(head));
  if (ec || in.bad())
    return makeError(path, ": cannot read the snapshot file");
  Expected<Header> h =
      parseHeader(head, static_cast<uint64_t>(in.gcount()), plan, planId, path);
  if (!h)
    return h.status();
  K3_RETURN_IF_ERROR(checkSize(size, *h, path));
  K3_RETURN_IF_ERROR(readRegularFile(path, h->total(), bytes, "snapshot file"));
  return parseSnapshot(bytes, plan, planId, path);
}

} // namespace k3
