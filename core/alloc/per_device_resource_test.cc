// The per-device resource map in a running process: a default pool per device created on first
// use, replaced and restored with set_per_device_resource, and devices outside the backend's
// range rejected. (What the map does at process exit is tested in child processes, in
// process_exit_test.cc.)
#include "core/alloc/per_device_resource.h"

#include <gtest/gtest.h>

#include "core/alloc/pool_resource.h"
#include "core/alloc/process_exit.h"
#include "core/alloc/statistics_adaptor.h"

namespace faultline::core::alloc {
namespace {

TEST(per_device_resource, default_is_one_pool_per_device_created_on_first_use) {
  auto r = get_per_device_resource(0);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_NE(dynamic_cast<pool_resource*>(*r), nullptr);
  auto again = get_per_device_resource(0);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *r);
  auto p = (*r)->allocate(4096);
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_TRUE((*r)->deallocate(*p, 4096));
  EXPECT_FALSE(process_is_exiting());
}

TEST(per_device_resource, each_device_gets_its_own_default) {
  auto n = device::current().device_count();
  ASSERT_TRUE(n);
  if (*n < 2) GTEST_SKIP() << "one device";
  auto r0 = get_per_device_resource(0);
  auto r1 = get_per_device_resource(1);
  ASSERT_TRUE(r0);
  ASSERT_TRUE(r1);
  EXPECT_NE(*r0, *r1);
}

TEST(per_device_resource, rejects_devices_outside_the_backend_range) {
  EXPECT_EQ(get_per_device_resource(-1).code(), errc::invalid_argument);
  EXPECT_EQ(get_per_device_resource(max_per_device_resources).code(), errc::invalid_argument);
  auto n = device::current().device_count();
  ASSERT_TRUE(n);
  auto missing = get_per_device_resource(*n);
  EXPECT_EQ(missing.code(), errc::invalid_argument);
  EXPECT_NE(missing.error().message().find("not present"), std::string::npos) << missing.error().message();
  EXPECT_EQ(set_per_device_resource(*n, nullptr).code(), errc::invalid_argument);
}

TEST(per_device_resource, set_replaces_the_resource_and_nullptr_restores_the_default) {
  auto original = get_per_device_resource(0);
  ASSERT_TRUE(original);
  statistics_adaptor stats(**original);
  auto previous = set_per_device_resource(0, &stats);
  ASSERT_TRUE(previous);
  EXPECT_EQ(*previous, *original);
  auto now = get_per_device_resource(0);
  ASSERT_TRUE(now);
  EXPECT_EQ(*now, &stats);
  auto p = (*now)->allocate(1000);
  ASSERT_TRUE(p);
  EXPECT_EQ(stats.counts().current_bytes, 1000u);
  ASSERT_TRUE((*now)->deallocate(*p, 1000));

  auto restored = set_per_device_resource(0, nullptr);
  ASSERT_TRUE(restored);
  EXPECT_EQ(*restored, &stats);
  auto back = get_per_device_resource(0);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, *original);
}

TEST(per_device_resource, current_device_resource_is_the_current_devices_entry) {
  auto cur = device::current().current_device();
  ASSERT_TRUE(cur);
  auto a = get_current_device_resource();
  auto b = get_per_device_resource(*cur);
  ASSERT_TRUE(a) << a.error().to_string();
  ASSERT_TRUE(b);
  EXPECT_EQ(*a, *b);
}

}  // namespace
}  // namespace faultline::core::alloc
