//===- JsonCheck.cpp - Structural limits on JSON input --------------------===//
//
// nlohmann's SAX parser keeps its own state in a vector, not on the call
// stack, and this handler keeps one frame per open array or object, so the
// pass itself is safe at any depth. Syntax errors are left to the tree parser
// that runs next: it stops at the same byte with the same message, before it
// has built anything deeper than this pass allowed.
//
//===----------------------------------------------------------------------===//
#include "runtime/io/JsonCheck.h"

#include <nlohmann/json.hpp>

#include <string>
#include <unordered_set>
#include <vector>

namespace k3 {

namespace {

using json = nlohmann::json;

class LimitSax {
public:
  explicit LimitSax(size_t maxDepth) : maxDepth_(maxDepth) {}

  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }
  bool number_unsigned(json::number_unsigned_t) { return value(); }
  bool number_float(json::number_float_t, const json::string_t &) {
    return value();
  }
  bool string(json::string_t &) { return value(); }
  bool binary(json::binary_t &) { return value(); }

  bool start_object(size_t) { return open(true); }
  bool start_array(size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t &k) {
    Frame &f = frames_.back();
    if (!f.keys.insert(k).second) {
      error_ = "duplicate key '" + k + "' in " + where() +
               " (a key may appear only once per object)";
      return false;
    }
    f.key = k;
    return true;
  }

  bool parse_error(size_t, const std::string &,
                   const nlohmann::detail::exception &) {
    syntaxError_ = true;
    return false;
  }

  const std::string &error() const { return error_; }

private:
  struct Frame {
    bool object = false;
    std::unordered_set<std::string> keys; ///< objects: keys seen so far
    std::string key;                      ///< objects: the current key
    size_t index = 0;                     ///< arrays: the next element
  };

  /// A value (scalar or, from open(), a container) completed in the frame
  /// on top: arrays count their elements for paths.
  bool value() {
    if (!frames_.empty() && !frames_.back().object)
      ++frames_.back().index;
    return true;
  }
  bool open(bool object) {
    if (frames_.size() >= maxDepth_) {
      error_ = "JSON nested deeper than " + std::to_string(maxDepth_) +
               " levels at " + where() + " (refused before parsing)";
      return false;
    }
    frames_.emplace_back();
    frames_.back().object = object;
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value();
  }
  /// The path of the innermost open value: "text_config", "shape[2]", or
  /// "the top-level object".
  std::string where() const {
    std::string p;
    for (size_t i = 0; i < frames_.size(); ++i) {
      const Frame &f = frames_[i];
      const bool last = i + 1 == frames_.size();
      if (f.object) {
        if (last)
          break; // the object itself: its key is not entered yet
        p += (p.empty() ? "" : ".") + f.key;
      } else {
        p += "[" + std::to_string(f.index) + "]";
      }
    }
    return p.empty() ? "the top-level object" : p;
  }

  size_t maxDepth_;
  std::vector<Frame> frames_;
  std::string error_;
  bool syntaxError_ = false;
};

} // namespace

Status checkJsonText(std::string_view text, size_t maxDepth) {
  LimitSax sax(maxDepth);
  try {
    json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const std::exception &) {
    // Not expected (SAX errors go to parse_error); the tree parser reports
    // whatever is wrong.
  }
  if (!sax.error().empty())
    return Status::error(sax.error());
  return Status::ok();
}

} // namespace k3
