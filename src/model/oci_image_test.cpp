#include "model/oci_image.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool {
namespace {

using ::testing::HasSubstr;

const std::string kDigest = "sha256:" + std::string(64, 'a');

TEST(OciImageTest, AManifestsLayersAndSizesAreSummed) {
  auto info = ParseImageManifest(R"({"schemaVersion": 2,
      "mediaType": "application/vnd.oci.image.manifest.v1+json",
      "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": ")" +
                                 kDigest + R"(", "size": 100},
      "layers": [{"digest": "sha256:1", "size": 1000}, {"digest": "sha256:2", "size": 24}]})");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_FALSE(info->is_index);
  EXPECT_EQ(info->layers, 2);
  EXPECT_EQ(info->bytes, 1124);
  EXPECT_EQ(info->config_digest, kDigest);
}

TEST(OciImageTest, SchemaOneAndIndexesHaveNoSizes) {
  auto v1 = ParseImageManifest(R"({"schemaVersion": 1, "fsLayers": [{"blobSum": "x"}, {}]})");
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(v1->layers, 2);
  EXPECT_FALSE(v1->bytes.has_value());
  auto index = ParseImageManifest(R"({"manifests": [{"digest": "sha256:1", "size": 1}]})");
  ASSERT_TRUE(index.ok());
  EXPECT_TRUE(index->is_index);
  EXPECT_FALSE(index->bytes.has_value());
}

TEST(OciImageTest, HostileSizesAreRefusedNotWrapped) {
  for (const char* bad : {
           R"({"layers": [{"size": -1}]})",
           R"({"layers": [{"size": 1.5}]})",
           R"({"layers": [{"size": "12"}]})",
           R"({"layers": [{}]})",
           R"({"layers": [{"size": 18446744073709551615}]})",
           R"({"layers": [{"size": 9223372036854775807}, {"size": 9223372036854775807}]})",
           R"({"layers": [{"size": 9223372036854775807}], "config": {"size": 1}})",
           R"({"layers": [1]})",
           R"({"layers": {}})",
           R"({"layers": [], "config": []})",
           R"({"mediaType": "something"})",
           R"([])",
           "not json",
       }) {
    auto info = ParseImageManifest(bad);
    EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(ParseImageManifest(R"({"layers": [{"size": 1}, {"size": -4}]})").status().message(),
              HasSubstr("layers[1].size"));
}

TEST(OciImageTest, DeepOrHugeDocumentsAreRefusedBeforeTheyAreBuilt) {
  std::string deep = R"({"layers": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_EQ(ParseImageManifest(deep).status().code(), StatusCode::kInvalidArgument);
  std::string huge = R"({"config": {"Env": [")" + std::string(kMaxImageJsonBytes, 'x') + R"("]}})";
  EXPECT_THAT(ParseImageConfig(huge).status().message(), HasSubstr("more than"));
}

TEST(OciImageTest, SkopeoInspectGivesTheLayersSizes) {
  auto info = ParseSkopeoInspect(R"({"Name": "x", "Layers": ["sha256:1", "sha256:2"],
      "LayersData": [{"Digest": "sha256:1", "Size": 10}, {"Digest": "sha256:2", "Size": 5}]})");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->layers, 2);
  EXPECT_EQ(info->bytes, 15);
  auto old = ParseSkopeoInspect(R"({"Layers": ["sha256:1"]})");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->layers, 1);
  EXPECT_FALSE(old->bytes.has_value());
  EXPECT_FALSE(ParseSkopeoInspect(R"({"LayersData": [{"Size": -1}]})").ok());
  EXPECT_FALSE(ParseSkopeoInspect(R"({"Layers": [1]})").ok());
}

TEST(OciImageTest, TheTaggedManifestOfALayout) {
  std::string index = R"({"schemaVersion": 2, "manifests": [
      {"digest": "sha256:old", "annotations": {"org.opencontainers.image.ref.name": "gpupool"}},
      {"digest": "sha256:other", "annotations": {"org.opencontainers.image.ref.name": "x"}},
      {"digest": ")" + kDigest +
                      R"(", "annotations": {"org.opencontainers.image.ref.name": "gpupool"}},
      {"digest": "sha256:none"}]})";
  EXPECT_EQ(*TaggedManifestDigest(index, "gpupool"), kDigest);  // the last one
  EXPECT_EQ(TaggedManifestDigest(index, "missing").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(TaggedManifestDigest(R"({"manifests": [{"digest": 5, "annotations":
      {"org.opencontainers.image.ref.name": "t"}}]})",
                                    "t")
                   .ok());
}

TEST(OciImageTest, TheConfigAndItsRoundTrip) {
  auto c = ParseImageConfig(R"({"architecture": "amd64", "config": {"Env": ["A=1", "PATH=/bin"],
      "WorkingDir": "/app", "Entrypoint": ["/bin/sh", "-c"], "Cmd": ["echo hi"], "User": "1000",
      "Labels": {"x": "y"}}, "history": [{"created_by": "RUN x"}]})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->env, (std::vector<std::string>{"A=1", "PATH=/bin"}));
  EXPECT_EQ(c->working_dir, "/app");
  EXPECT_EQ(c->entrypoint, (std::vector<std::string>{"/bin/sh", "-c"}));
  EXPECT_EQ(c->cmd, (std::vector<std::string>{"echo hi"}));
  EXPECT_EQ(c->user, "1000");
  auto back = ImageConfigFromJson(ImageConfigToJson(*c), "config");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *c);
  EXPECT_TRUE(ParseImageConfig(R"({"architecture": "amd64"})").ok());  // no config: empty
  EXPECT_THAT(ParseImageConfig(R"({"config": {"Env": ["A=1", 2]}})").status().message(),
              HasSubstr("config.Env[1]: must be a string"));
  EXPECT_THAT(ParseImageConfig(R"({"config": {"User": 0}})").status().message(),
              HasSubstr("config.User"));
  EXPECT_FALSE(ParseImageConfig(R"({"config": []})").ok());
}

TEST(OciImageTest, DigestHex) {
  EXPECT_EQ(DigestHex(kDigest), std::string(64, 'a'));
  EXPECT_EQ(DigestHex("sha256:" + std::string(64, 'A')), "");
  EXPECT_EQ(DigestHex("sha256:abc"), "");
  EXPECT_EQ(DigestHex("sha512:" + std::string(64, 'a')), "");
  EXPECT_EQ(DigestHex("sha256:" + std::string(63, 'a') + "/"), "");
}

}  // namespace
}  // namespace gpupool
