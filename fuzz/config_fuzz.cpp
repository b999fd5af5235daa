//===- config_fuzz.cpp - libFuzzer target: the config.json reader ---------===//
//
// Input: config.json text. parseConfigText must return a config or an error,
// never crash, hang or allocate without bound; what it accepts must be valid
// and survive writeConfigJson -> parseConfigText unchanged (the plan and the
// weights directory compare configs through that text).
//
//===----------------------------------------------------------------------===//
#include "runtime/model/Config.h"

#include "FuzzUtil.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string text(reinterpret_cast<const char *>(data), size);
  k3::Expected<k3::ModelConfig> c = k3::parseConfigText(text, "fuzz.json");
  if (!c) {
    K3_FUZZ_CHECK(!c.message().empty(), "an error without a message");
    return 0;
  }
  K3_FUZZ_CHECK(c->validate().isOk(), "accepted an invalid config");
  const std::string again = k3::writeConfigJson(*c);
  k3::Expected<k3::ModelConfig> back = k3::parseConfigText(again, "again");
  K3_FUZZ_CHECK(back.hasValue(), "the written config does not read back");
  K3_FUZZ_CHECK(*back == *c, "the config changed in the round trip");
  K3_FUZZ_CHECK(k3::writeConfigJson(*back) == again,
                "the writer is not deterministic");
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned seed) {
  return k3::fuzz::mutateJson(data, size, maxSize, seed);
}
