//===- Status.h - Error values for the k3c runtime --------------*- C++ -*-===//
//
// The runtime has no LLVM dependency, so it carries its own small error type.
// Library code never calls exit(): every fallible function returns a Status
// or an Expected<T>, and the tools print the message and choose the exit code.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_STATUS_H
#define K3C_RUNTIME_STATUS_H

#include <cassert>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace k3 {

/// Success, or an error with a human-readable message that says what is wrong
/// and, where possible, what to do about it.
class [[nodiscard]] Status {
public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.message_ = std::move(message);
    return s;
  }
  bool isOk() const { return !message_.has_value(); }
  explicit operator bool() const { return isOk(); }
  const std::string &message() const {
    assert(!isOk() && "message() on an ok Status");
    return *message_;
  }
  /// Prefixes the message with context (e.g. the file being read).
  Status withContext(const std::string &context) const {
    if (isOk())
      return *this;
    return error(context + ": " + *message_);
  }

private:
  std::optional<std::string> message_;
};

/// Builds an error message from stream operands:
/// `return makeError("tensor ", name, " has ", n, " dims");`
template <typename... Args> Status makeError(const Args &...args) {
  std::ostringstream os;
  (os << ... << args);
  return Status::error(os.str());
}

/// A value or an error.
template <typename T> class [[nodiscard]] Expected {
public:
  Expected(T value) : value_(std::move(value)) {}
  Expected(Status status) : status_(std::move(status)) {
    assert(!status_.isOk() && "Expected built from an ok Status");
  }
  bool hasValue() const { return value_.has_value(); }
  explicit operator bool() const { return hasValue(); }
  T &operator*() { return *value_; }
  const T &operator*() const { return *value_; }
  T *operator->() { return &*value_; }
  const T *operator->() const { return &*value_; }
  T take() { return std::move(*value_); }
  const Status &status() const { return status_; }
  const std::string &message() const { return status_.message(); }

private:
  std::optional<T> value_;
  Status status_;
};

} // namespace k3

/// Returns the Status of `expr` from the enclosing function if it failed.
#define K3_RETURN_IF_ERROR(expr)                                               \
  do {                                                                         \
    ::k3::Status k3_status_ = (expr);                                          \
    if (!k3_status_.isOk())                                                    \
      return k3_status_;                                                       \
  } while (0)

#endif // K3C_RUNTIME_STATUS_H
