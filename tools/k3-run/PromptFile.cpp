//===- PromptFile.cpp - Token id lists and --prompts files ----------------===//
//
// strtoll on each field with the whole field required to parse, so "1x",
// "1.5" and an id beyond int64 are refused rather than truncated; the range
// [0, vocab) is the session's check (Session::checkPrompt), which needs the
// plan.
//
//===----------------------------------------------------------------------===//
#include "tools/k3-run/PromptFile.h"

#include "runtime/io/AtomicFile.h"

#include <cerrno>
#include <cstdlib>

namespace k3 {

namespace {

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/// One field: a decimal integer, optionally signed.
Status parseId(const std::string &field, int64_t &out) {
  const size_t digits = field[0] == '-' || field[0] == '+' ? 1 : 0;
  bool ok = field.size() > digits;
  for (size_t i = digits; ok && i < field.size(); ++i)
    ok = field[i] >= '0' && field[i] <= '9';
  if (ok) {
    errno = 0;
    const long long v = std::strtoll(field.c_str(), nullptr, 10);
    ok = errno == 0;
    out = v;
  }
  if (!ok)
    return makeError("'", field,
                     "' is not a token id (ids are decimal integers "
                     "separated by commas or spaces)");
  return Status::ok();
}

} // namespace

Status parseIdList(const std::string &text, std::vector<int64_t> &out) {
  out.clear();
  std::string field;
  bool fieldSinceComma = false; // an id since the last comma
  bool sawComma = false;
  auto flush = [&]() -> Status {
    if (field.empty())
      return Status::ok();
    int64_t v = 0;
    K3_RETURN_IF_ERROR(parseId(field, v));
    out.push_back(v);
    field.clear();
    fieldSinceComma = true;
    return Status::ok();
  };
  for (char c : text) {
    if (c == ',') {
      K3_RETURN_IF_ERROR(flush());
      if (!fieldSinceComma)
        return makeError("an empty id before a comma (ids are separated by "
                         "one comma and/or spaces)");
      fieldSinceComma = false;
      sawComma = true;
    } else if (isSpace(c)) {
      K3_RETURN_IF_ERROR(flush());
    } else {
      field += c;
    }
  }
  K3_RETURN_IF_ERROR(flush());
  if (out.empty())
    return makeError("no token ids");
  if (sawComma && !fieldSinceComma)
    return makeError("a comma after the last id");
  return Status::ok();
}

Expected<std::vector<Prompt>> parsePrompts(const std::string &text,
                                           const std::string &origin) {
  std::vector<Prompt> prompts;
  int64_t line = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos)
      nl = text.size();
    std::string content = text.substr(start, nl - start);
    start = nl + 1;
    ++line;
    const size_t hash = content.find('#');
    if (hash != std::string::npos)
      content.resize(hash);
    bool blank = true;
    for (char c : content)
      blank = blank && isSpace(c);
    if (blank)
      continue;
    Prompt p;
    p.line = line;
    K3_RETURN_IF_ERROR(parseIdList(content, p.ids)
                           .withContext(origin + ":" + std::to_string(line)));
    prompts.push_back(std::move(p));
  }
  if (prompts.empty())
    return makeError(origin, ": no prompts (one line of token ids per "
                             "prompt; blank lines and # comments are skipped)");
  return prompts;
}

Expected<std::vector<Prompt>> readPromptsFile(const std::string &path) {
  std::string text;
  K3_RETURN_IF_ERROR(
      readRegularFile(path, kMaxPromptsFileBytes, text, "prompts file"));
  return parsePrompts(text, path);
}

} // namespace k3
