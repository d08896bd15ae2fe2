// The adaptors keep exact numbers: statistics count only what the upstream granted or took back;
// tracking lists live allocations oldest first and stops double frees before the upstream; the
// limiting adaptor charges first and rolls back when the upstream fails, with a shared account
// seen by several adaptors. A test upstream refuses sizes or fails frees on demand.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "core/alloc/alloc_test_util.h"
#include "core/alloc/device_resource.h"
#include "core/alloc/limiting_adaptor.h"
#include "core/alloc/pool_resource.h"
#include "core/alloc/region_account.h"
#include "core/alloc/statistics_adaptor.h"
#include "core/alloc/tracking_adaptor.h"

namespace faultline::core::alloc {
namespace {

using testing::test_upstream;
using testing::dev;

TEST(statistics_adaptor, counts_current_peak_and_total_exactly) {
  test_upstream upstream(dev());
  statistics_adaptor stats(upstream);
  void* a = *stats.allocate(1000);
  void* b = *stats.allocate(3000);
  ASSERT_TRUE(stats.deallocate(a, 1000));
  void* c = *stats.allocate(500);
  auto n = stats.counts();
  EXPECT_EQ(n.current_bytes, 3500u);
  EXPECT_EQ(n.peak_bytes, 4000u);
  EXPECT_EQ(n.total_bytes, 4500u);
  EXPECT_EQ(n.current_count, 2u);
  EXPECT_EQ(n.peak_count, 2u);
  EXPECT_EQ(n.total_count, 3u);
  EXPECT_EQ(n.failed_allocations, 0u);
  ASSERT_TRUE(stats.deallocate(b, 3000));
  ASSERT_TRUE(stats.deallocate(c, 500));
  n = stats.counts();
  EXPECT_EQ(n.current_bytes, 0u);
  EXPECT_EQ(n.current_count, 0u);
  EXPECT_EQ(n.peak_bytes, 4000u);
}

TEST(statistics_adaptor, a_refused_allocation_changes_nothing_but_the_failure_count) {
  test_upstream upstream(dev());
  upstream.refuse_above_bytes = 4096;
  statistics_adaptor stats(upstream);
  void* a = *stats.allocate(4096);
  auto refused = stats.allocate(8192);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.code(), errc::out_of_memory);
  auto n = stats.counts();
  EXPECT_EQ(n.current_bytes, 4096u);
  EXPECT_EQ(n.peak_bytes, 4096u);
  EXPECT_EQ(n.total_count, 1u);
  EXPECT_EQ(n.failed_allocations, 1u);
  ASSERT_TRUE(stats.deallocate(a, 4096));
}

TEST(statistics_adaptor, a_failed_free_keeps_the_bytes_counted) {
  test_upstream upstream(dev());
  statistics_adaptor stats(upstream);
  void* a = *stats.allocate(2048);
  upstream.fail_deallocate = true;
  EXPECT_FALSE(stats.deallocate(a, 2048));
  EXPECT_EQ(stats.counts().current_bytes, 2048u);
  upstream.fail_deallocate = false;
  ASSERT_TRUE(stats.deallocate(a, 2048));
  EXPECT_EQ(stats.counts().current_bytes, 0u);
}

TEST(statistics_adaptor, concurrent_use_balances_to_zero) {
  device_resource raw;
  pool_resource pool(raw);
  statistics_adaptor stats(pool);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        auto p = stats.allocate(1024 + i);
        if (p) (void)stats.deallocate(*p, 1024 + i);
      }
    });
  }
  for (auto& t : threads) t.join();
  auto n = stats.counts();
  EXPECT_EQ(n.current_bytes, 0u);
  EXPECT_EQ(n.total_count, 2000u);
  EXPECT_GE(n.peak_count, 1u);
  EXPECT_LE(n.peak_count, 4u);
}

TEST(tracking_adaptor, lists_outstanding_allocations_oldest_first) {
  test_upstream upstream(dev());
  tracking_adaptor tracked(upstream, "t");
  const device::stream s{reinterpret_cast<void*>(0x40)};
  void* a = *tracked.allocate(100);
  void* b = *tracked.allocate(200, s);
  void* c = *tracked.allocate(300);
  ASSERT_TRUE(tracked.deallocate(a, 100));
  auto live = tracked.outstanding();
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0].ptr, b);
  EXPECT_EQ(live[0].bytes, 200u);
  EXPECT_EQ(live[0].stream, s);
  EXPECT_EQ(live[0].sequence, 1u);
  EXPECT_EQ(live[1].ptr, c);
  EXPECT_EQ(tracked.outstanding_bytes(), 500u);
  EXPECT_EQ(tracked.outstanding_count(), 2u);
  EXPECT_NE(tracked.report().find("2 allocation(s) (500 bytes) outstanding"), std::string::npos);
  ASSERT_TRUE(tracked.deallocate(b, 200, s));
  ASSERT_TRUE(tracked.deallocate(c, 300));
  EXPECT_EQ(tracked.outstanding_count(), 0u);
}

TEST(tracking_adaptor, stops_double_frees_and_wrong_sizes_before_the_upstream) {
  test_upstream upstream(dev());
  tracking_adaptor tracked(upstream, "t");
  void* a = *tracked.allocate(512);
  auto wrong = tracked.deallocate(a, 256);
  EXPECT_EQ(wrong.code(), errc::invalid_argument);
  EXPECT_NE(wrong.message().find("allocated with 512 bytes"), std::string::npos) << wrong.message();
  ASSERT_TRUE(tracked.deallocate(a, 512));
  auto again = tracked.deallocate(a, 512);
  EXPECT_EQ(again.code(), errc::invalid_argument);
  EXPECT_NE(again.message().find("double free"), std::string::npos);
  EXPECT_EQ(upstream.deallocations(), 1u);
}

TEST(tracking_adaptor, keeps_an_allocation_live_when_the_upstream_free_fails) {
  test_upstream upstream(dev());
  tracking_adaptor tracked(upstream, "t");
  void* a = *tracked.allocate(512);
  upstream.fail_deallocate = true;
  EXPECT_FALSE(tracked.deallocate(a, 512));
  EXPECT_EQ(tracked.outstanding_bytes(), 512u);
  upstream.fail_deallocate = false;
  EXPECT_TRUE(tracked.deallocate(a, 512));
  EXPECT_EQ(tracked.outstanding_bytes(), 0u);
}

TEST(tracking_adaptor, reports_outstanding_allocations_when_destroyed) {
  test_upstream upstream(dev());
  void* leaked = nullptr;
  ::testing::internal::CaptureStderr();
  {
    tracking_adaptor tracked(upstream, "scenario buffers");
    leaked = *tracked.allocate(4096);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("faultline: scenario buffers: 1 allocation(s) (4096 bytes) outstanding"), std::string::npos)
      << err;
  ASSERT_TRUE(upstream.deallocate(leaked, 4096));
}

TEST(limiting_adaptor, refuses_past_the_limit_without_charging) {
  test_upstream upstream(dev());
  limiting_adaptor capped(upstream, 10000);
  void* a = *capped.allocate(6000);
  auto over = capped.allocate(5000);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.code(), errc::out_of_memory);
  EXPECT_NE(over.error().message().find("limit of 10000 bytes"), std::string::npos) << over.error().message();
  EXPECT_EQ(capped.allocated_bytes(), 6000u);
  EXPECT_EQ(capped.refused_count(), 1u);
  EXPECT_EQ(upstream.requests().size(), 1u);  // the refused one never reached the upstream
  void* b = *capped.allocate(4000);            // exactly to the limit
  EXPECT_EQ(capped.allocated_bytes(), 10000u);
  ASSERT_TRUE(capped.deallocate(a, 6000));
  ASSERT_TRUE(capped.deallocate(b, 4000));
  EXPECT_EQ(capped.allocated_bytes(), 0u);
}

TEST(limiting_adaptor, rolls_back_the_charge_when_the_upstream_fails) {
  test_upstream upstream(dev());
  upstream.refuse_above_bytes = 1000;
  limiting_adaptor capped(upstream, 1 << 20);
  auto p = capped.allocate(5000);
  ASSERT_FALSE(p);
  EXPECT_EQ(capped.allocated_bytes(), 0u);
  EXPECT_EQ(capped.refused_count(), 0u);  // the limit did not refuse it; the upstream did
  void* a = *capped.allocate(1000);
  upstream.fail_deallocate = true;
  EXPECT_FALSE(capped.deallocate(a, 1000));
  EXPECT_EQ(capped.allocated_bytes(), 1000u);  // a failed free still holds its bytes
  upstream.fail_deallocate = false;
  ASSERT_TRUE(capped.deallocate(a, 1000));
  EXPECT_EQ(capped.allocated_bytes(), 0u);
}

TEST(limiting_adaptor, adaptors_sharing_an_account_share_one_budget) {
  test_upstream up0(dev());
  test_upstream up1(dev());
  local_byte_account budget(8192);
  limiting_adaptor a(up0, budget);
  limiting_adaptor b(up1, budget);
  void* p = *a.allocate(6000);
  auto q = b.allocate(3000);
  ASSERT_FALSE(q);
  EXPECT_EQ(budget.charged_bytes(), 6000u);
  EXPECT_EQ(b.allocated_bytes(), 6000u);
  ASSERT_TRUE(a.deallocate(p, 6000));
  auto r = b.allocate(3000);
  ASSERT_TRUE(r);
  EXPECT_EQ(budget.charged_bytes(), 3000u);
  ASSERT_TRUE(b.deallocate(*r, 3000));
}

TEST(limiting_adaptor, over_the_shared_region_another_process_charges_the_same_budget) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("fl_region_account." + std::to_string(::getpid()))).string();
  std::filesystem::remove(path);
  accounting::options opts;
  opts.limits_bytes = {10000};
  opts.exit_handlers = false;
  auto r = accounting::region::create_or_attach(path, opts);
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_TRUE((*r)->register_process());
  region_byte_account account(**r, 0);
  test_upstream upstream(dev());
  limiting_adaptor capped(upstream, account);
  EXPECT_EQ(capped.limit_bytes(), 10000u);
  void* a = *capped.allocate(6000);
  // Another process charges 3000 and dies without its exit cleanup (as by SIGKILL).
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto other = accounting::region::attach(path, opts);
    const bool ok = other && (*other)->register_process() && (*other)->charge(0, accounting::kind::data, 3000);
    ::_exit(ok ? 0 : 1);  // no destructors: the slot stays charged
  }
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_EQ(capped.allocated_bytes(), 9000u);  // the node's usage, not this process's
  auto over = capped.allocate(2000);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.code(), errc::out_of_memory);
  EXPECT_EQ(capped.refused_count(), 1u);
  EXPECT_EQ(upstream.requests().size(), 1u);
  EXPECT_EQ(*(*r)->usage(0), 9000u);  // the refusal left every counter exact
  // Repair reclaims the dead process's bytes; then the allocation fits.
  auto rep = (*r)->repair();
  ASSERT_TRUE(rep) << rep.error().message();
  EXPECT_EQ(rep->dead_slots_reclaimed, 1u);
  void* b = *capped.allocate(2000);
  EXPECT_EQ(capped.allocated_bytes(), 8000u);
  ASSERT_TRUE(capped.deallocate(a, 6000));
  ASSERT_TRUE(capped.deallocate(b, 2000));
  EXPECT_EQ(*(*r)->usage(0), 0u);
  EXPECT_EQ((*(*r)->own_usage(0)).data, 0u);
  (void)(*r)->detach();
  std::filesystem::remove(path);
}

TEST(limiting_adaptor, concurrent_charges_never_pass_the_limit_and_end_at_zero) {
  device_resource raw;
  pool_resource pool(raw);
  constexpr std::size_t limit = 64 * 1024;
  limiting_adaptor capped(pool, limit);
  // What the callers hold (granted, not yet returned); the account itself may briefly count a
  // charge it is about to roll back.
  std::atomic<std::size_t> held{0};
  std::atomic<bool> over{false};
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      std::vector<void*> mine;
      for (int i = 0; i < 1000; ++i) {
        if (mine.size() < 4) {
          if (auto p = capped.allocate(8192)) {
            if (held.fetch_add(8192) + 8192 > limit) over = true;
            mine.push_back(*p);
            ++granted;
          }
        } else {
          for (void* p : mine) {
            held.fetch_sub(8192);
            (void)capped.deallocate(p, 8192);
          }
          mine.clear();
        }
      }
      for (void* p : mine) {
        held.fetch_sub(8192);
        (void)capped.deallocate(p, 8192);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(over.load());
  EXPECT_GT(granted.load(), 0);
  EXPECT_EQ(capped.allocated_bytes(), 0u);
}

TEST(local_byte_account, refuses_a_charge_that_would_wrap_around) {
  local_byte_account account(100);
  ASSERT_TRUE(account.charge(50));
  auto st = account.charge(static_cast<std::size_t>(-1));
  EXPECT_EQ(st.code(), errc::out_of_memory);
  EXPECT_EQ(account.charged_bytes(), 50u);
}

}  // namespace
}  // namespace faultline::core::alloc
