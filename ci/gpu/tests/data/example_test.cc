#include <gtest/gtest.h>
TEST(pool_resource, a_passing_case) { EXPECT_EQ(1, 1); }
TEST(pool_resource, frees_on_the_allocating_stream) { EXPECT_EQ(2 + 2, 5) << "freed on stream 3, allocated on 1"; }
TEST(cuda_gpu, needs_a_device) { GTEST_SKIP() << "no CUDA device answers: unavailable"; }
