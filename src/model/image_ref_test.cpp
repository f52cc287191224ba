#include "model/image_ref.h"

#include <gtest/gtest.h>

#include <string>

namespace gpupool {
namespace {

ImageRef MustParse(std::string_view text) {
  Result<ImageRef> r = ParseImageRef(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().ToString();
  return r.ok() ? *r : ImageRef{};
}

std::string ErrorOf(std::string_view text) {
  Result<ImageRef> r = ParseImageRef(text);
  EXPECT_FALSE(r.ok()) << text << " was accepted";
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
  return r.status().message();
}

TEST(ImageRefTest, DockerForms) {
  ImageRef r = MustParse("docker://busybox:1.36");
  EXPECT_EQ(r.kind, ImageRef::Kind::kDocker);
  EXPECT_EQ(r.text, "docker://busybox:1.36");
  EXPECT_EQ(r.location, "busybox:1.36");
  EXPECT_EQ(r.tag, "");
  EXPECT_FALSE(r.local());

  EXPECT_EQ(MustParse("docker://busybox").location, "busybox");
  EXPECT_EQ(MustParse("docker://nvcr.io/nvidia/pytorch:24.01-py3").location,
            "nvcr.io/nvidia/pytorch:24.01-py3");
  EXPECT_EQ(MustParse("docker://localhost:5000/lab/train").location, "localhost:5000/lab/train");
  EXPECT_EQ(MustParse("docker://localhost:5000/lab/train:v2").location,
            "localhost:5000/lab/train:v2");
  std::string digest = "sha256:" + std::string(64, 'a');
  EXPECT_EQ(MustParse("docker://busybox@" + digest).location, "busybox@" + digest);
  EXPECT_EQ(MustParse("docker://busybox:1.36@" + digest).location, "busybox:1.36@" + digest);
  EXPECT_EQ(MustParse("docker://my_org/some-image.x").location, "my_org/some-image.x");
}

TEST(ImageRefTest, LocalForms) {
  ImageRef a = MustParse("oci-archive:/srv/img.tar");
  EXPECT_EQ(a.kind, ImageRef::Kind::kOciArchive);
  EXPECT_EQ(a.location, "/srv/img.tar");
  EXPECT_TRUE(a.local());

  ImageRef d = MustParse("docker-archive:/srv/saved.tar");
  EXPECT_EQ(d.kind, ImageRef::Kind::kDockerArchive);
  EXPECT_EQ(d.location, "/srv/saved.tar");

  ImageRef o = MustParse("oci:/srv/layout:v1.2");
  EXPECT_EQ(o.kind, ImageRef::Kind::kOciDir);
  EXPECT_EQ(o.location, "/srv/layout");
  EXPECT_EQ(o.tag, "v1.2");
  EXPECT_EQ(o.text, "oci:/srv/layout:v1.2");

  ImageRef untagged = MustParse("oci:/srv/layout");
  EXPECT_EQ(untagged.location, "/srv/layout");
  EXPECT_EQ(untagged.tag, "");
  EXPECT_NE(untagged, o);
  EXPECT_EQ(MustParse("oci:/srv/layout:v1.2"), o);
}

TEST(ImageRefTest, RejectsUnknownTransports) {
  const std::string expected =
      ": expected docker://REF, oci-archive:PATH, docker-archive:PATH or oci:DIR[:TAG]";
  EXPECT_EQ(ErrorOf("foo"), "image \"foo\"" + expected);
  EXPECT_EQ(ErrorOf("busybox:1.36"), "image \"busybox:1.36\"" + expected);
  EXPECT_EQ(ErrorOf("docker:busybox"), "image \"docker:busybox\"" + expected);
  EXPECT_EQ(ErrorOf("dir:/srv/x"), "image \"dir:/srv/x\"" + expected);
  EXPECT_EQ(ErrorOf(""), "image \"\"" + expected);
}

TEST(ImageRefTest, RejectsBadPaths) {
  EXPECT_EQ(ErrorOf("oci-archive:img.tar"),
            "image \"oci-archive:img.tar\": the path must be absolute");
  EXPECT_EQ(ErrorOf("docker-archive:./x.tar"),
            "image \"docker-archive:./x.tar\": the path must be absolute");
  EXPECT_EQ(ErrorOf("oci-archive:"), "image \"oci-archive:\": the path is empty");
  EXPECT_EQ(ErrorOf("oci:"), "image \"oci:\": the directory is empty");
  EXPECT_EQ(ErrorOf("oci::tag"), "image \"oci::tag\": the directory is empty");
  EXPECT_EQ(ErrorOf("oci:layout:tag"), "image \"oci:layout:tag\": the directory must be absolute");
  EXPECT_EQ(ErrorOf("oci:/srv/layout:"), "image \"oci:/srv/layout:\": the tag is empty");
  EXPECT_EQ(ErrorOf("oci:/srv/layout:a/b"),
            "image \"oci:/srv/layout:a/b\": invalid tag \"a/b\" (letters, digits, '_', '.' and "
            "'-', at most 128)");
  EXPECT_EQ(ErrorOf("docker-archive:/srv/x.tar:name:tag"),
            "image \"docker-archive:/srv/x.tar:name:tag\": the path must not contain ':'");
  EXPECT_EQ(ErrorOf("oci-archive:/srv/../etc/img.tar"),
            "image \"oci-archive:/srv/../etc/img.tar\": the path must not contain \".\" or \"..\" "
            "components");
}

TEST(ImageRefTest, RejectsBadDockerReferences) {
  EXPECT_EQ(ErrorOf("docker://"), "image \"docker://\": the image name is empty");
  EXPECT_EQ(ErrorOf("docker://:latest"), "image \"docker://:latest\": the image name is empty");
  EXPECT_EQ(ErrorOf("docker://busybox:"), "image \"docker://busybox:\": the tag is empty");
  EXPECT_EQ(ErrorOf("docker://BusyBox"),
            "image \"docker://BusyBox\": invalid image name \"BusyBox\" (lowercase letters, "
            "digits, '.', '_', '-' and '/')");
  EXPECT_EQ(ErrorOf("docker://a//b"),
            "image \"docker://a//b\": invalid image name \"a//b\" (lowercase letters, digits, "
            "'.', '_', '-' and '/')");
  EXPECT_EQ(ErrorOf("docker://busybox@sha256:abc"),
            "image \"docker://busybox@sha256:abc\": invalid digest \"sha256:abc\" (expected "
            "sha256: and 64 lowercase hex digits)");
  EXPECT_EQ(ErrorOf("docker://bad_host:x/img"),
            "image \"docker://bad_host:x/img\": invalid registry \"bad_host:x\"");
  EXPECT_EQ(ErrorOf("docker://busybox:-x"),
            "image \"docker://busybox:-x\": invalid tag \"-x\" (letters, digits, '_', '.' and "
            "'-', at most 128)");
}

TEST(ImageRefTest, RejectsWhitespaceControlAndLength) {
  EXPECT_EQ(ErrorOf("docker://busy box"),
            "image \"docker://busy box\": contains whitespace or a control character");
  EXPECT_EQ(ErrorOf("oci-archive:/srv/img.tar\n"),
            "image \"oci-archive:/srv/img.tar\n\": contains whitespace or a control character");
  EXPECT_EQ(ErrorOf(std::string("oci:/srv/x\x01", 11)),
            std::string("image \"oci:/srv/x\x01\": contains whitespace or a control character"));
  std::string ok_long = "oci-archive:/" + std::string(kMaxImageRefLength - 13, 'a');
  ASSERT_EQ(ok_long.size(), kMaxImageRefLength);
  EXPECT_TRUE(ParseImageRef(ok_long).ok());
  std::string too_long = ok_long + "a";
  std::string message = ErrorOf(too_long);
  EXPECT_EQ(message, "image \"" + too_long.substr(0, 80) + "...\": longer than 1024 characters");
}

}  // namespace
}  // namespace gpupool
