//===- JsonCheck.h - Structural limits on JSON input ------------*- C++ -*-===//
//
// Every JSON document the runtime reads (config.json, safetensors headers and
// their index, plans) passes checkJsonText before it is parsed into a tree:
// one streaming (SAX) pass, no recursion, that refuses nesting deeper than a
// bound (a document nested 150k deep would otherwise overflow the stack in
// whatever walks the tree) and duplicate keys in one object (which a tree
// parser silently resolves to the last value, so two readers of one file
// could disagree about a field).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_IO_JSONCHECK_H
#define K3C_RUNTIME_IO_JSONCHECK_H

#include "runtime/Status.h"

#include <cstddef>
#include <string_view>

namespace k3 {

/// Deepest nesting of arrays and objects accepted (the deepest real document,
/// a plan, nests 4 levels).
constexpr size_t kMaxJsonDepth = 64;

/// Checks that `text` is one well-formed JSON value nested at most
/// `maxDepth` levels, with no key repeated within an object. Errors name the
/// object path ("duplicate key 'hidden_size' in text_config").
Status checkJsonText(std::string_view text, size_t maxDepth = kMaxJsonDepth);

} // namespace k3

#endif // K3C_RUNTIME_IO_JSONCHECK_H
