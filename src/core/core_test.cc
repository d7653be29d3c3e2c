#include "core/core.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "catalog/catalog.h"
#include "testing/testing.h"

namespace tessera::core {
namespace {

class CoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = catalog::Catalog::LoadEmbedded();
    ASSERT_TRUE(c.ok());
    catalog_ = std::make_unique<catalog::Catalog>(std::move(*c));
    options_.catalog = catalog_.get();
    options_.data_dir = dir_.File("data");
    options_.clock = &clock_;
    auto core = Core::Start(options_);
    ASSERT_TRUE(core.ok()) << core.status().message();
    core_ = std::move(*core);
  }

  Result<Tenant> CreateTenant(const std::string& name) {
    return core_->Run<Tenant>([name](State& s, store::Batch& b) {
      return s.tenants().Create(name, 1000, "hash-" + name, b);
    });
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<catalog::Catalog> catalog_;
  CoreOptions options_;
  std::unique_ptr<Core> core_;
};

TEST_F(CoreTest, ACommandThatThrowsFailsItsRoundAndMemoryComesBackFromTheStore) {
  ASSERT_TRUE(CreateTenant("kept").ok());
  // A command that changes memory and then throws: its change must not survive.
  auto thrown = core_->Run<bool>([](State& s, store::Batch& b) -> Result<bool> {
    (void)s.tenants().Create("half-done", 1000, "hash-half", b);
    throw std::runtime_error("a bug");
  });
  ASSERT_FALSE(thrown.ok());
  EXPECT_EQ(thrown.status().code(), StatusCode::kInternal);
  auto names = core_->Run<std::vector<std::string>>([](State& s, store::Batch&) {
    std::vector<std::string> out;
    for (const Tenant* t : s.tenants().List()) out.push_back(t->name);
    return Result<std::vector<std::string>>(out);
  });
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"kept"});
  // The principal index the HTTP threads read agrees: the half-made tenant's token is unknown.
  auto index = core_->principals();
  EXPECT_TRUE(index->count("hash-kept"));
  EXPECT_FALSE(index->count("hash-half"));
  // And the core serves on.
  EXPECT_TRUE(CreateTenant("after").ok());
}

TEST_F(CoreTest, ThePrincipalIndexIsPublishedOnlyOnceACommitIsDurable) {
  auto before = core_->principals();
  EXPECT_FALSE(before->count("hash-acme"));
  std::shared_ptr<const PrincipalIndex> seen_inside;
  auto created = core_->Run<Tenant>([&](State& s, store::Batch& b) {
    auto t = s.tenants().Create("acme", 1000, "hash-acme", b);
    seen_inside = core_->principals();  // Before the commit: still the old index.
    return t;
  });
  ASSERT_TRUE(created.ok());
  EXPECT_FALSE(seen_inside->count("hash-acme"));
  EXPECT_TRUE(core_->principals()->count("hash-acme"));
}

}  // namespace
}  // namespace tessera::core
