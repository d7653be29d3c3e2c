// The node's volumes on this machine's disk: a loop-mounted ext4 file system per volume where the
// agent is root (its size a hard limit), plain directories otherwise; who owns them and when.
#include "agent/volumes.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "testing/testing.h"

namespace tessera::agent {
namespace {

// Writes `bytes` zero bytes to `path`; the errno of the write that failed, or 0.
int Fill(const std::string& path, int64_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return errno;
  const std::string chunk(1 << 20, '\0');
  int err = 0;
  for (int64_t done = 0; done < bytes && err == 0; done += static_cast<int64_t>(chunk.size())) {
    if (std::fwrite(chunk.data(), 1, chunk.size(), f) != chunk.size()) err = errno;
  }
  if (std::fflush(f) != 0 && err == 0) err = errno;
  if (std::fclose(f) != 0 && err == 0) err = errno;
  return err;
}

uid_t OwnerOf(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
}

TEST(VolumeHostTest, AVolumeImageHoldsItsSizeAndGoesWithItsData) {
  testing::TempDir dir;
  auto host = VolumeHost::Open({dir.File("volumes")});
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  if (!(*host)->enforced()) GTEST_SKIP() << "no volume images here: " << (*host)->note();
  auto path = (*host)->Prepare("vol-000001", 1);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  // A write past 1 GiB fails: the volume is full, not the node's disk.
  EXPECT_EQ(Fill(*path + "/big", int64_t{1100} << 20), ENOSPC);
  auto held = (*host)->List();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].id, "vol-000001");
  EXPECT_TRUE(held[0].enforced);
  EXPECT_LE(held[0].size_bytes, int64_t{1} << 30);
  EXPECT_GT(held[0].used_bytes, int64_t{900} << 20);
  // Prepared again (the next attempt), it is the same file system with the same files.
  ASSERT_TRUE((*host)->Prepare("vol-000001", 1).ok());
  struct stat st {};
  EXPECT_EQ(stat((*path + "/big").c_str(), &st), 0);
  ASSERT_TRUE((*host)->Remove("vol-000001").ok());
  EXPECT_TRUE((*host)->List().empty());
  EXPECT_NE(stat(path->c_str(), &st), 0);
  EXPECT_NE(stat((*path + ".img").c_str(), &st), 0);
}

TEST(VolumeHostTest, WithoutImagesAVolumeIsADirectoryAndTheHostSaysSo) {
  testing::TempDir dir;
  auto host = VolumeHost::Open({dir.File("volumes"), /*use_images=*/false});
  ASSERT_TRUE(host.ok());
  EXPECT_FALSE((*host)->enforced());
  EXPECT_NE((*host)->note().find("only watched"), std::string::npos) << (*host)->note();
  auto path = (*host)->Prepare("vol-000002", 1);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  ASSERT_EQ(Fill(*path + "/f", 3 << 20), 0);
  auto held = (*host)->List();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_FALSE(held[0].enforced);
  EXPECT_GE(held[0].used_bytes, 3 << 20);
  ASSERT_TRUE((*host)->Remove("vol-000002").ok());
  EXPECT_TRUE((*host)->List().empty());
}

TEST(VolumeHostTest, IdsThatCouldLeaveTheDirectoryAreRefused) {
  testing::TempDir dir;
  auto host = VolumeHost::Open({dir.File("volumes"), false});
  ASSERT_TRUE(host.ok());
  for (const char* id : {"../x", "vol-1/../../etc", "vol-", "vol-12a", ""}) {
    EXPECT_EQ((*host)->Prepare(id, 1).status().code(), StatusCode::kInvalidArgument) << id;
    EXPECT_EQ((*host)->Remove(id).code(), StatusCode::kInvalidArgument) << id;
  }
  EXPECT_EQ((*host)->Prepare("vol-3", 0).status().code(), StatusCode::kInvalidArgument);
}

// A workload uid goes to another tenant once its tenant's work has ended: the volume is locked
// first, and given back whole to whichever uid its tenant has next.
TEST(VolumeHostTest, AVolumeIsItsWorkloadsUidsWhileMountedAndRootsBetween) {
  if (geteuid() != 0) GTEST_SKIP() << "chown needs root";
  testing::TempDir dir;
  auto host = VolumeHost::Open({dir.File("volumes"), false});
  ASSERT_TRUE(host.ok());
  auto path = (*host)->Prepare("vol-000004", 1);
  ASSERT_TRUE(path.ok());
  ASSERT_EQ(mkdir((*path + "/sub").c_str(), 0755), 0);
  std::ofstream(*path + "/sub/f") << "x";
  std::ofstream(*path + "/shared-inode") << "y";
  ASSERT_EQ(link((*path + "/shared-inode").c_str(), (*path + "/second-link").c_str()), 0);
  ASSERT_TRUE(ClaimVolumeDir(*path, 1999000001).ok());
  EXPECT_EQ(OwnerOf(*path), 1999000001u);
  EXPECT_EQ(OwnerOf(*path + "/sub/f"), 1999000001u);
  EXPECT_EQ(OwnerOf(*path + "/shared-inode"), 0u) << "a file with two links is not given away";
  struct stat st {};
  ASSERT_EQ(stat(path->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_TRUE(LockVolumeDir(*path).ok());
  EXPECT_EQ(OwnerOf(*path), 0u);
  EXPECT_EQ(OwnerOf(*path + "/sub/f"), 1999000001u) << "locked at its root only";
  // The same uid again: only the root changes hands. Another uid: the whole tree.
  ASSERT_TRUE(ClaimVolumeDir(*path, 1999000001).ok());
  EXPECT_EQ(OwnerOf(*path), 1999000001u);
  ASSERT_TRUE(LockVolumeDir(*path).ok());
  ASSERT_TRUE(ClaimVolumeDir(*path, 1999000002).ok());
  EXPECT_EQ(OwnerOf(*path + "/sub/f"), 1999000002u);
  EXPECT_EQ(OwnerOf(*path + "/sub"), 1999000002u);
}

}  // namespace
}  // namespace tessera::agent
