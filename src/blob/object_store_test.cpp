// FsObjectStore (blob/object_store.h): the object calls the server's blob
// store makes, on files, and the keys it refuses (a path out of its
// directory).
#include "blob/object_store.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <algorithm>

#include <cstdlib>
#include <ctime>
#include <filesystem>

namespace gpupool::blob {
namespace {

using ::testing::HasSubstr;

class FsObjectStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/objects-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto s = FsObjectStore::Open(dir_ + "/objects", /*durable=*/true);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = *std::move(s);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  std::unique_ptr<FsObjectStore> store_;
};

TEST_F(FsObjectStoreTest, PutGetStatTouchListRemove) {
  ASSERT_TRUE(store_->Put("manifests/a.json", "first").ok());
  ASSERT_TRUE(store_->Put("manifests/a.json", "second").ok());  // replaced whole
  ASSERT_TRUE(store_->Put("manifests/b.json", "bb").ok());
  EXPECT_EQ(*store_->Get("manifests/a.json"), "second");
  auto info = store_->Stat("manifests/b.json");
  ASSERT_TRUE(info.ok() && info->has_value());
  EXPECT_EQ((*info)->bytes, 2);
  // Touch moves the modification time to now: from an hour ago, here.
  struct timespec old[2];
  old[0].tv_sec = old[1].tv_sec = ::time(nullptr) - 3600;
  old[0].tv_nsec = old[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, store_->PathOf("manifests/b.json").c_str(), old, 0), 0);
  const int64_t before = (*store_->Stat("manifests/b.json"))->modified_ms;
  EXPECT_EQ(before, static_cast<int64_t>(old[0].tv_sec) * 1000);
  ASSERT_TRUE(store_->Touch("manifests/b.json").ok());
  EXPECT_GE((*store_->Stat("manifests/b.json"))->modified_ms, before + 3'500'000);

  auto listed = store_->List("manifests/");
  ASSERT_TRUE(listed.ok());
  std::vector<std::string> keys;
  for (const ObjectInfo& o : *listed) keys.push_back(o.key);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"manifests/a.json", "manifests/b.json"}));

  ASSERT_TRUE(store_->Remove("manifests/a.json").ok());
  ASSERT_TRUE(store_->Remove("manifests/a.json").ok());  // absent: fine
  EXPECT_EQ(store_->Get("manifests/a.json").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(store_->Stat("manifests/a.json")->has_value());
  EXPECT_EQ(store_->Touch("manifests/a.json").code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->List("nothing-here/")->empty());
}

TEST_F(FsObjectStoreTest, KeysThatWouldLeaveItsDirectoryAreRefused) {
  for (const char* key : {"../escape", "manifests/../../etc/passwd", "/etc/passwd", "manifests//x",
                          "", "manifests/", "a b", "manifests/./x"}) {
    Status put = store_->Put(key, "x");
    EXPECT_EQ(put.code(), StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(put.message(), HasSubstr("object key")) << key;
    EXPECT_EQ(store_->Get(key).status().code(), StatusCode::kInvalidArgument) << key;
    EXPECT_EQ(store_->Remove(key).code(), StatusCode::kInvalidArgument) << key;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/escape"));
  EXPECT_EQ(store_->List("../").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpupool::blob
