//===- PromptFile.h - Token id lists and --prompts files --------*- C++ -*-===//
//
// k3-run takes prompts as token ids: `--prompt-ids 1,2,3` or a file given
// with `--prompts FILE`, one prompt per line. In both, ids are separated by
// commas and/or spaces ("1,2,3", "1 2 3" and "1, 2, 3" are the same); a
// file's blank lines and `#` comments (to the end of the line) are skipped
// and every error names the file and the line.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TOOLS_K3RUN_PROMPTFILE_H
#define K3C_TOOLS_K3RUN_PROMPTFILE_H

#include "runtime/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

/// The largest --prompts file read (a bound, not a limit a user should meet).
constexpr uint64_t kMaxPromptsFileBytes = uint64_t(64) << 20;

/// One prompt and where it came from.
struct Prompt {
  int64_t line = 0; ///< 1-based line of its --prompts file; 0: --prompt-ids
  std::vector<int64_t> ids;
};

/// Parses ids separated by commas and/or whitespace. Errors (without a
/// location): no ids, an empty field between commas, anything that is not
/// a decimal integer in int64 range.
Status parseIdList(const std::string &text, std::vector<int64_t> &out);

/// Parses the text of a --prompts file; `origin` prefixes each error as
/// "origin:LINE: ...". Errors: a line parseIdList refuses, no prompt at all.
Expected<std::vector<Prompt>> parsePrompts(const std::string &text,
                                           const std::string &origin);

/// Reads (a regular file of at most kMaxPromptsFileBytes) and parses `path`.
Expected<std::vector<Prompt>> readPromptsFile(const std::string &path);

} // namespace k3

#endif // K3C_TOOLS_K3RUN_PROMPTFILE_H
