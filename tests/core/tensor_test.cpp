#include "longseq/core/tensor.hpp"

#include <gtest/gtest.h>

#include <cstdint>

#include "longseq/core/arena.hpp"
#include "longseq/core/error.hpp"

using namespace longseq::core;

TEST(Shape, Basics) {
  Shape s{4, 8, 128};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 4 * 8 * 128);
  EXPECT_EQ(s.str(), "[4, 8, 128]");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_NE(s, (Shape{4, 8}));
  auto st = contiguous_strides(s);
  EXPECT_EQ(st[0], 8 * 128);
  EXPECT_EQ(st[1], 128);
  EXPECT_EQ(st[2], 1);
}

TEST(View, IndexAndSlice) {
  Tensor<float> t(Shape{3, 4, 5});
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = static_cast<float>(i);
  auto v = t.view();
  EXPECT_EQ(v(1, 2, 3), 1 * 20 + 2 * 5 + 3);
  auto s = v.slice(1, 1, 3);  // a head range: strided, not contiguous
  EXPECT_EQ(s.dim(1), 2);
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s(2, 0, 4), v(2, 1, 4));
  auto rows = v.slice(0, 1, 2);
  EXPECT_TRUE(rows.is_contiguous());
  longseq::core::View<const float> cv = v;
  EXPECT_EQ(cv(0, 0, 1), 1.0f);
}

TEST(Buffer, AlignedAndZeroed) {
  Buffer<double> b(13);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kAlignment, 0u);
  for (double x : b) EXPECT_EQ(x, 0.0);
  Buffer<float> empty(0);
  EXPECT_NE(empty.data(), nullptr);
}

TEST(Arena, BumpMarkReset) {
  Arena a(1024, "test");
  float* x = a.alloc<float>(10);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x) % kAlignment, 0u);
  const size_t m = a.mark();
  double* y = a.alloc<double>(20);
  EXPECT_GT(reinterpret_cast<uintptr_t>(y), reinterpret_cast<uintptr_t>(x));
  EXPECT_GE(a.used(), 40u + 160u);
  a.reset(m);
  EXPECT_EQ(a.used(), m);
  EXPECT_GE(a.peak(), 200u);
  double* y2 = a.alloc<double>(20);
  EXPECT_EQ(y, y2);
}

TEST(Arena, OverflowNamesArena) {
  Arena a(256, "params");
  a.alloc<float>(32);
  try {
    a.alloc<float>(100);
    FAIL() << "expected overflow";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("params"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("400"), std::string::npos) << e.what();
  }
}

TEST(Errors, MessageNamesComponent) {
  try {
    require(false, "attention", "--algo startrail:", 3, " needs C*C to divide world ", 8);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[attention] --algo startrail:3 needs C*C to divide world 8");
    EXPECT_EQ(e.component(), "attention");
  }
}

TEST(ErrorsDeathTest, CheckAbortsWithLocation) {
  EXPECT_DEATH(LONGSEQ_CHECK_MSG(1 + 1 == 3, "math is ", "broken"),
               "tensor_test.cpp:.*math is broken");
}
