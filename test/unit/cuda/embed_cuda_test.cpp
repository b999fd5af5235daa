//===- embed_cuda_test.cpp - k3_embed against embedCpu --------------------===//
#include "test/unit/cuda/CudaTestUtil.h"

#include "kernels/embed/EmbedCpu.h"

namespace {

using namespace k3test;

/// K3's real table is 163840 x 7168; a 4096-row slice keeps the upload small
/// while the row length is the production one.
TEST(EmbedCuda, MatchesCpuBitForBit) {
  K3_REQUIRE_GPU();
  for (auto [vocab, dim] :
       {std::pair<int64_t, int64_t>{1024, 256}, {4096, 7168}, {37, 1000}}) {
    Rand r(static_cast<uint64_t>(vocab * 31 + dim));
    std::vector<uint16_t> table = r.bf16(vocab * dim);
    Dev dTable = Dev::of(table);
    for (int64_t token : {int64_t(0), vocab / 3, vocab - 1}) {
      k3::EmbedParams p;
      p.table = table.data();
      p.vocab = vocab;
      p.dim = dim;
      p.token = token;
      std::vector<uint16_t> want(dim, 0xFFFF);
      p.out = want.data();
      k3::embedCpu(p);

      Dev dOut = Dev::poisoned<uint16_t>(dim);
      p.table = dTable.get<uint16_t>();
      p.out = dOut.get<uint16_t>();
      ASSERT_TRUE(launch("embed", p, /*gridX=*/(dim + 255) / 256).isOk());
      std::vector<uint16_t> got = dOut.download<uint16_t>(dim);
      EXPECT_EQ(got, want) << "vocab " << vocab << " dim " << dim << " token "
                           << token;
      // The copy is not trivially right: rows differ from each other.
      if (token != 0) {
        EXPECT_NE(got,
                  std::vector<uint16_t>(table.begin(), table.begin() + dim))
            << "row 0 returned for token " << token;
      }
    }
  }
}

/// A grid smaller than the work still covers it (grid-stride contract).
TEST(EmbedCuda, AnyGridCoversTheRow) {
  K3_REQUIRE_GPU();
  Rand r(5);
  std::vector<uint16_t> table = r.bf16(8 * 7168);
  Dev dTable = Dev::of(table);
  Dev dOut = Dev::poisoned<uint16_t>(7168);
  k3::EmbedParams p;
  p.table = dTable.get<uint16_t>();
  p.vocab = 8;
  p.dim = 7168;
  p.token = 5;
  p.out = dOut.get<uint16_t>();
  ASSERT_TRUE(launch("embed", p, /*gridX=*/1, /*blockX=*/64).isOk());
  EXPECT_EQ(dOut.download<uint16_t>(7168),
            std::vector<uint16_t>(table.begin() + 5 * 7168,
                                  table.begin() + 6 * 7168));
}

/// The multi-row form (k3_embed_rows): M rows in one launch, each row's
/// params from a device array (its own token, one row reading it from its
/// step block, its own output): every row the bytes its single-row launch
/// writes, outputs poisoned first, at K3's width and an odd one.
TEST(EmbedCuda, RowsAsOneLaunchPerRow) {
  K3_REQUIRE_GPU();
  for (auto [vocab, dim] :
       {std::pair<int64_t, int64_t>{4096, 7168}, {37, 1000}}) {
    Rand r(static_cast<uint64_t>(vocab + dim));
    std::vector<uint16_t> table = r.bf16(vocab * dim);
    Dev dTable = Dev::of(table);
    for (int M : {2, 7}) {
      std::vector<Dev> single, rows, steps;
      std::vector<k3::EmbedParams> params;
      for (int i = 0; i < M; ++i) {
        k3::EmbedParams p;
        p.table = dTable.get<uint16_t>();
        p.vocab = vocab;
        p.dim = dim;
        p.token = (7 * i + 3) % vocab;
        if (i == 1) { // this row's token from its step block
          std::vector<int64_t> step(k3::kStepWords, 0);
          step[k3::kStepToken] = vocab - 2;
          steps.push_back(Dev::of(step));
          p.step = steps.back().get<int64_t>();
        }
        single.push_back(Dev::poisoned<uint16_t>(dim));
        rows.push_back(Dev::poisoned<uint16_t>(dim));
        p.out = single.back().get<uint16_t>();
        ASSERT_TRUE(launch("embed", p, (dim + 255) / 256).isOk());
        p.out = rows.back().get<uint16_t>();
        params.push_back(p);
      }
      Dev array = Dev::of(params);
      k3::EmbedRowsParams rp;
      rp.rows = array.get<k3::EmbedParams>();
      rp.count = M;
      ASSERT_TRUE(
          launch("embed_rows", rp, (dim + 255) / 256, 256, 0, 1, M).isOk());
      for (int i = 0; i < M; ++i) {
        const int64_t token = i == 1 ? vocab - 2 : (7 * i + 3) % vocab;
        const auto want = single[i].download<uint16_t>(dim);
        EXPECT_EQ(want,
                  std::vector<uint16_t>(table.begin() + token * dim,
                                        table.begin() + (token + 1) * dim))
            << "single launch, row " << i;
        EXPECT_EQ(rows[i].download<uint16_t>(dim), want)
            << "rows form, " << M << " rows, row " << i;
      }
    }
  }
}

} // namespace
