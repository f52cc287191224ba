#include "server/static_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

namespace gpupool::server {
namespace {

namespace fs = std::filesystem;

class StaticFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("gpupool-static-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "web" / "js");
    Write(root_ / "web" / "index.html", "<h1>pool</h1>");
    Write(root_ / "web" / "js" / "app.js", "console.log(1)");
    Write(root_ / "secret.txt", "outside");  // next to the web directory, not in it
  }
  void TearDown() override { fs::remove_all(root_); }

  static void Write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

  void Open(size_t max_bytes = 1 << 20) {
    StaticFilesOptions o;
    o.dir = (root_ / "web").string();
    o.max_file_bytes = max_bytes;
    auto files = StaticFiles::Open(o);
    ASSERT_TRUE(files.ok()) << files.status().ToString();
    files_ = *std::move(files);
    routes_ = ApiRoutes();
    files_->AddRoutes(routes_);
  }

  // What GET `path` answers; nullopt when no route matched.
  std::optional<net::HttpResponse> Get(const std::string& path) {
    auto found = routes_.Find("GET", path);
    if (!found.ok()) return std::nullopt;
    EXPECT_EQ(found->route->access, Access::kPublic);
    std::optional<net::HttpResponse> got;
    auto respond = std::make_shared<net::Responder>([&](net::HttpResponse r) { got = r; });
    net::HttpRequest req;
    req.method = "GET";
    req.path = path;
    found->route->handler(req, Principal{}, found->params, respond);
    EXPECT_TRUE(got.has_value()) << path << " was not answered";
    return got;
  }

  void ExpectRefused(const std::string& path) {
    auto r = Get(path);
    ASSERT_TRUE(r.has_value()) << path;
    EXPECT_EQ(r->status, 404) << path << ": " << r->body;
    EXPECT_EQ(r->body.find("outside"), std::string::npos) << path;
  }

  fs::path root_;
  std::unique_ptr<StaticFiles> files_;
  ApiRoutes routes_;
};

TEST_F(StaticFilesTest, ServesTheIndexAndFilesWithTheirTypeAndSafeHeaders) {
  Open();
  auto index = Get("/ui");
  ASSERT_TRUE(index.has_value());
  EXPECT_EQ(index->status, 200);
  EXPECT_EQ(index->body, "<h1>pool</h1>");
  EXPECT_EQ(index->content_type, "text/html; charset=utf-8");
  EXPECT_EQ(index->headers["x-content-type-options"], "nosniff");
  EXPECT_NE(index->headers["content-security-policy"].find("default-src 'self'"),
            std::string::npos);
  auto js = Get("/ui/js/app.js");
  ASSERT_TRUE(js.has_value());
  EXPECT_EQ(js->status, 200);
  EXPECT_EQ(js->body, "console.log(1)");
  EXPECT_EQ(js->content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(ContentTypeFor("a.b/noext"), "application/octet-stream");
  EXPECT_EQ(ContentTypeFor("logo.svg"), "image/svg+xml");
}

TEST_F(StaticFilesTest, NothingOutsideTheDirectoryOrHiddenOrSpecialIsServed) {
  Write(root_ / "web" / ".env", "outside");  // a hidden file
  fs::create_symlink(root_ / "secret.txt", root_ / "web" / "link.txt");
  fs::create_directory_symlink(root_, root_ / "web" / "up");
  ASSERT_EQ(::mkfifo((root_ / "web" / "pipe.html").c_str(), 0600), 0);
  Open();
  for (const char* path : {"/ui/../secret.txt", "/ui/js/../../secret.txt", "/ui/%2e%2e/secret.txt",
                           "/ui/..%2fsecret.txt", "/ui/.env", "/ui/link.txt", "/ui/up/secret.txt",
                           "/ui/pipe.html",  // a FIFO: refused without blocking the server
                           "/ui/js",         // a directory
                           "/ui/missing.html", "/ui/js/app.js\\..\\..\\secret.txt"}) {
    ExpectRefused(path);
  }
  // A refusal says no more than a missing file does.
  EXPECT_EQ(Get("/ui/link.txt")->body.find("symlink"), std::string::npos);
}

TEST_F(StaticFilesTest, AFileOverTheLimitIsNotServed) {
  Write(root_ / "web" / "big.js", std::string(4096, 'x'));
  Open(/*max_bytes=*/1024);
  ExpectRefused("/ui/big.js");
  EXPECT_EQ(Get("/ui/js/app.js")->status, 200);
}

TEST_F(StaticFilesTest, AMissingDirectoryIsAClearError) {
  StaticFilesOptions o;
  o.dir = (root_ / "nope").string();
  auto files = StaticFiles::Open(o);
  ASSERT_FALSE(files.ok());
  EXPECT_NE(files.status().message().find("--web-dir"), std::string::npos);
  EXPECT_NE(files.status().message().find("nope"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::server
