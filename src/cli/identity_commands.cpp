#include "cli/identity_commands.h"

#include <termios.h>
#include <unistd.h>

#include <iostream>

#include "cli/command_util.h"
#include "cli/table.h"
#include "common/clock.h"
#include "net/http.h"

namespace gpupool::cli {

using nlohmann::json;

namespace {

// A password from stdin (one line), or typed at the terminal without echo.
Result<std::string> ReadPassword(bool from_stdin, const std::string& prompt) {
  bool tty = ::isatty(STDIN_FILENO) == 1;
  termios old{};
  if (!from_stdin && tty) {
    std::cerr << prompt << std::flush;
    ::tcgetattr(STDIN_FILENO, &old);
    termios quiet = old;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
  }
  std::string password;
  std::getline(std::cin, password);
  if (!from_stdin && tty) {
    ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
    std::cerr << "\n";
  }
  if (password.empty()) return Status::InvalidArgument("no password given");
  return password;
}

std::string When(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number_integer()) return "never";
  return FormatTimestampMs(j[key].get<int64_t>());
}

int PrintOr(const GlobalFlags& g, const json& j, const std::function<void()>& table) {
  if (g.output == "json") {
    std::cout << j.dump(2) << "\n";
  } else {
    table();
  }
  return 0;
}

// Runs `fn(api)` against the configured server.
int WithApi(const GlobalFlags& g, const std::function<int(ApiClient&)>& fn) {
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  return fn(*api);
}

int CmdLogin(GlobalFlags& g, IdentityFlags& f) {
  Endpoint flags = FlagsEndpoint(g);
  flags.token.clear();  // a stored token is not used to log in
  auto resolved = ResolveEndpoint(flags);
  if (!resolved.ok()) return ReportError(resolved.status());
  Endpoint e = *resolved;
  e.token = g.token;
  auto url = net::ParseUrl(e.server);
  if (url && url->scheme == "https" && e.tls.ca_fingerprint.empty() && e.tls.ca_file.empty() &&
      !e.tls.insecure) {
    std::cerr << "gpupool login: note: checking " << e.server
              << " against the system's CAs; for a pool with its own CA pass --ca-fingerprint "
                 "(the server prints it at start, and `gpupool admin join-token` shows it)\n";
  }
  if (e.token.empty()) {
    std::string user = f.user;
    if (user.empty()) {
      const char* u = std::getenv("USER");
      user = u ? u : "";
    }
    auto password = ReadPassword(f.password_stdin, "password for " + user + ": ");
    if (!password.ok()) return ReportError(password.status());
    ApiClient anon(e);
    auto r = anon.Post("/v1/login", {{"user", user}, {"password", *password}, {"name", "cli"}});
    if (!r.ok()) return ReportError(r.status());
    e.token = Str(*r, "token");
  }
  ApiClient api(e);
  auto me = api.Get("/v1/whoami");
  if (!me.ok()) return ReportError(me.status());
  if (Status s = WriteConfig(ConfigPath(), e); !s.ok()) return ReportError(s);
  std::cout << "logged in to " << e.server << " as " << Str(*me, "subject") << " ("
            << Str(*me, "role") << "); the token is in " << ConfigPath() << " (mode 0600)\n";
  return 0;
}

int CmdWhoami(const GlobalFlags& g) {
  return WithApi(g, [&](ApiClient& api) {
    auto me = api.Get("/v1/whoami");
    if (!me.ok()) return ReportError(me.status());
    return PrintOr(g, *me, [&] {
      std::string groups;
      for (const auto& x : (*me)["groups"])
        groups += (groups.empty() ? "" : ",") + x.get<std::string>();
      std::cout << Str(*me, "subject") << " (" << Str(*me, "role") << ")"
                << (groups.empty() ? "" : " groups " + groups) << ", token " << Str(*me, "token_id")
                << " scopes " << Str(*me, "scopes") << "\n";
    });
  });
}

int CmdUserAdd(const GlobalFlags& g, const IdentityFlags& f) {
  json body = {{"name", f.target}, {"role", f.role}};
  if (f.password_stdin || ::isatty(STDIN_FILENO) == 1) {
    auto password = ReadPassword(f.password_stdin, "password for " + f.target + ": ");
    if (!password.ok()) return ReportError(password.status());
    body["password"] = *password;
  }
  return WithApi(g, [&](ApiClient& api) {
    auto r = api.Post("/v1/users", body);
    if (!r.ok()) return ReportError(r.status());
    return PrintOr(g, *r, [&] {
      std::cout << "user " << Str(*r, "name") << " (" << Str(*r, "role") << ") added"
                << ((*r)["password_login"].get<bool>() ? "" : " without a password") << "\n";
    });
  });
}

int CmdUserList(const GlobalFlags& g) {
  return WithApi(g, [&](ApiClient& api) {
    auto r = api.Get("/v1/users");
    if (!r.ok()) return ReportError(r.status());
    return PrintOr(g, *r, [&] {
      Table t({"USER", "ROLE", "PASSWORD", "STATE", "CREATED"});
      for (const json& u : (*r)["users"]) {
        t.Add({Str(u, "name"), Str(u, "role"), u["password_login"].get<bool>() ? "yes" : "no",
               u["disabled"].get<bool>() ? "disabled" : "active", When(u, "created_ms")});
      }
      t.Print(std::cout);
    });
  });
}

int CmdPostAndSay(const GlobalFlags& g, const std::string& target, const json& body,
                  const std::string& said) {
  return WithApi(g, [&](ApiClient& api) {
    auto r = api.Post(target, body);
    if (!r.ok()) return ReportError(r.status());
    return PrintOr(g, *r, [&] { std::cout << said << "\n"; });
  });
}

int CmdGroupMembers(const GlobalFlags& g, const IdentityFlags& f) {
  return WithApi(g, [&](ApiClient& api) {
    std::string target = "/v1/groups/" + net::UrlEncode(f.target) + "/members";
    Result<json> r = f.add.empty() && f.remove.empty() && !f.shared_jobs
                         ? api.Get(target)
                         : api.Post(target, [&] {
                             json b = {{"add", f.add}, {"remove", f.remove}};
                             if (f.shared_jobs) b["shared_jobs"] = true;
                             return b;
                           }());
    if (!r.ok()) return ReportError(r.status());
    return PrintOr(g, *r, [&] {
      std::string members;
      for (const auto& m : (*r)["members"]) members += " " + m.get<std::string>();
      std::cout << "group " << Str(*r, "name") << ":"
                << (members.empty() ? " (no members)" : members)
                << ((*r)["shared_jobs"].get<bool>() ? "; members share their jobs" : "") << "\n";
    });
  });
}

int CmdTokenCreate(const GlobalFlags& g, const IdentityFlags& f) {
  json body = {{"scopes", f.scopes}};
  if (!f.name.empty()) body["name"] = f.name;
  if (!f.user.empty()) body["user"] = f.user;
  if (!f.expires.empty()) body["expires_in"] = f.expires;
  return WithApi(g, [&](ApiClient& api) {
    auto r = api.Post("/v1/tokens", body);
    if (!r.ok()) return ReportError(r.status());
    return PrintOr(g, *r, [&] {
      std::cout << Str(*r, "token") << "\n";
      std::cerr << "token " << Str(*r, "id") << " for " << Str(*r, "user") << ", scopes "
                << Str(*r, "scopes") << ", expires " << When(*r, "expires_ms")
                << ". It is shown only now.\n";
    });
  });
}

int CmdTokenList(const GlobalFlags& g, const IdentityFlags& f) {
  std::string target = "/v1/tokens";
  if (f.all)
    target += "?all=1";
  else if (!f.user.empty())
    target += "?user=" + net::UrlEncode(f.user);
  return WithApi(g, [&](ApiClient& api) {
    auto r = api.Get(target);
    if (!r.ok()) return ReportError(r.status());
    return PrintOr(g, *r, [&] {
      Table t({"ID", "USER", "NAME", "SCOPES", "CREATED", "EXPIRES", "STATE"});
      for (const json& x : (*r)["tokens"]) {
        std::string state = x["revoked"].get<bool>()   ? "revoked"
                            : x["expired"].get<bool>() ? "expired"
                                                       : "active";
        t.Add({Str(x, "id"), Str(x, "user"), Str(x, "name"), Str(x, "scopes"),
               When(x, "created_ms"), When(x, "expires_ms"), state});
      }
      t.Print(std::cout);
    });
  });
}

int CmdAudit(const GlobalFlags& g, const IdentityFlags& f) {
  std::string target =
      "/v1/audit?after=" + std::to_string(f.after) + "&limit=" + std::to_string(f.limit);
  return WithApi(g, [&](ApiClient& api) {
    auto r = api.Get(target);
    if (!r.ok()) return ReportError(r.status());
    return PrintOr(g, *r, [&] {
      Table t({"ID", "TIME", "ACTOR", "ACTION", "TARGET", "RESULT", "FROM", "DETAIL"});
      for (const json& e : (*r)["entries"]) {
        t.Add({std::to_string(Int(e, "id")), When(e, "ts_ms"), Str(e, "actor"), Str(e, "action"),
               Str(e, "target"), e["ok"].get<bool>() ? "ok" : "refused", Str(e, "peer"),
               Str(e, "detail")});
      }
      t.Print(std::cout);
    });
  });
}

int CmdNodeList(const GlobalFlags& g) {
  return WithApi(g, [&](ApiClient& api) {
    auto r = api.Get("/v1/agents");
    if (!r.ok()) return ReportError(r.status());
    return PrintOr(g, *r, [&] {
      Table t({"NODE", "ENROLLED BY", "CERTIFICATE", "ENROLLED", "STATE"});
      for (const json& c : (*r)["agents"]) {
        std::string owner = Str(c, "owner");
        t.Add({Str(c, "node"), owner.empty() ? "join token" : owner,
               Str(c, "cert_serial").empty() ? "(node token only)" : Str(c, "cert_serial"),
               When(c, "enrolled_ms"), c["revoked"].get<bool>() ? "revoked" : "active"});
      }
      t.Print(std::cout);
    });
  });
}

}  // namespace

void AddIdentityCommands(CLI::App& app, CLI::App& admin, GlobalFlags& g, IdentityFlags& f) {
  auto global = [](CLI::App* c) {
    c->fallthrough();
    return c;
  };
  auto* login = global(app.add_subcommand(
      "login", "log in to a pool: stores the server, its CA fingerprint and a token"));
  login->add_option("--user", f.user, "user name (default: $USER)");
  login->add_flag("--password-stdin", f.password_stdin, "read the password from stdin");
  login->callback([&] { f.run = [&] { return CmdLogin(g, f); }; });
  global(app.add_subcommand("whoami", "who the configured token acts as"))->callback([&] {
    f.run = [&] { return CmdWhoami(g); };
  });

  auto* token = app.add_subcommand("token", "API tokens: create, list, revoke");
  token->require_subcommand(1);
  auto* create = global(token->add_subcommand("create", "make a token (shown once)"));
  create->add_option("--name", f.name, "what it is for");
  create->add_option("--scopes", f.scopes,
                     "comma-separated: jobs:read, jobs:write, pool:read, nodes:write, tokens, "
                     "admin, enroll, metrics; * = all of your role's (default)");
  create->add_option("--expires", f.expires, "lifetime, e.g. 12h or 90d (default 90d), or never");
  create->add_option("--user", f.user, "for another user (admins)");
  create->callback([&] { f.run = [&] { return CmdTokenCreate(g, f); }; });
  auto* list = global(token->add_subcommand("list", "your tokens (admins: --all or --user)"));
  list->add_flag("--all", f.all, "every user's tokens (admins)");
  list->add_option("--user", f.user, "this user's tokens (admins)");
  list->callback([&] { f.run = [&] { return CmdTokenList(g, f); }; });
  auto* revoke = global(token->add_subcommand("revoke", "revoke a token by its id"));
  revoke->add_option("id", f.target, "the token's id (gpupool token list)")->required();
  revoke->callback([&] {
    f.run = [&] {
      return CmdPostAndSay(g, "/v1/tokens/" + net::UrlEncode(f.target) + "/revoke", json::object(),
                           "token " + f.target + " revoked");
    };
  });

  auto* user = admin.add_subcommand("user", "users: add, list, disable, enable, password");
  user->require_subcommand(1);
  auto* user_add = global(user->add_subcommand("add", "add a user"));
  user_add->add_option("name", f.target, "user name")->required();
  user_add->add_option("--role", f.role, "member, provider or admin")->capture_default_str();
  user_add->add_flag("--password-stdin", f.password_stdin,
                     "read a password from stdin (default: prompt on a terminal; none otherwise)");
  user_add->callback([&] { f.run = [&] { return CmdUserAdd(g, f); }; });
  global(user->add_subcommand("list", "list users"))->callback([&] {
    f.run = [&] { return CmdUserList(g); };
  });
  for (const char* verb : {"disable", "enable"}) {
    auto* c = global(user->add_subcommand(
        verb, std::string(verb) == "disable" ? "disable a user and revoke all their tokens"
                                             : "let a disabled user in again (new tokens needed)"));
    c->add_option("name", f.target, "user name")->required();
    c->callback([&, verb] {
      f.run = [&, verb] {
        return CmdPostAndSay(g, "/v1/users/" + net::UrlEncode(f.target) + "/" + verb,
                             json::object(), "user " + f.target + " " + verb + "d");
      };
    });
  }
  auto* password = global(user->add_subcommand("password", "set a user's password"));
  password->add_option("name", f.target, "user name")->required();
  password->add_flag("--password-stdin", f.password_stdin, "read the password from stdin");
  password->callback([&] {
    f.run = [&] {
      auto p = ReadPassword(f.password_stdin, "new password for " + f.target + ": ");
      if (!p.ok()) return ReportError(p.status());
      return CmdPostAndSay(g, "/v1/users/" + net::UrlEncode(f.target) + "/password",
                           {{"password", *p}}, "password of " + f.target + " changed");
    };
  });

  auto* group = admin.add_subcommand("group", "groups (labs): add, members");
  group->require_subcommand(1);
  auto* group_add = global(group->add_subcommand("add", "add a group"));
  group_add->add_option("name", f.target, "group name")->required();
  group_add->add_flag("--shared-jobs", f.shared_jobs, "members see and cancel each other's jobs");
  group_add->callback([&] {
    f.run = [&] {
      return CmdPostAndSay(g, "/v1/groups", {{"name", f.target}, {"shared_jobs", f.shared_jobs}},
                           "group " + f.target + " added");
    };
  });
  auto* members = global(group->add_subcommand("members", "show or change a group's members"));
  members->add_option("name", f.target, "group name")->required();
  members->add_option("--add", f.add, "add this user (repeatable)");
  members->add_option("--remove", f.remove, "remove this user (repeatable)");
  members->add_flag("--shared-jobs", f.shared_jobs, "from now on members share their jobs");
  members->callback([&] { f.run = [&] { return CmdGroupMembers(g, f); }; });

  auto* audit = global(admin.add_subcommand("audit", "the audit log of security-relevant actions"));
  audit->add_option("--after", f.after, "entries after this id");
  audit->add_option("--limit", f.limit, "at most this many")->capture_default_str();
  audit->callback([&] { f.run = [&] { return CmdAudit(g, f); }; });

  auto* node = admin.add_subcommand(
      "node",
      "agents' credentials (list, revoke, allow) and their owners' holds (pause, "
      "resume, reclaim)");
  node->require_subcommand(1);
  global(node->add_subcommand("list", "enrolled agents"))->callback([&] {
    f.run = [&] { return CmdNodeList(g); };
  });
  auto* node_revoke = global(node->add_subcommand(
      "revoke", "revoke a node's credential: it is refused at once, its jobs requeued"));
  node_revoke->add_option("name", f.target, "node name")->required();
  node_revoke->callback([&] {
    f.run = [&] {
      return CmdPostAndSay(
          g, "/v1/nodes/" + net::UrlEncode(f.target) + "/revoke", json::object(),
          "node " + f.target + " revoked; its running jobs are requeued elsewhere");
    };
  });
  // The owner's commands, sent through the server to the node's agent.
  const std::pair<const char*, const char*> holds[] = {
      {"pause", "no new work starts on the node; running work goes on"},
      {"resume", "the node lends again (not past a hold made on the machine itself)"},
      {"reclaim", "take the node's GPUs back: their jobs are checkpointed and requeued"}};
  for (const auto& [verb, what] : holds) {
    auto* hold = global(node->add_subcommand(verb, what));
    hold->add_option("name", f.target, "node name")->required();
    if (std::string(verb) == "reclaim") {
      hold->add_option("--gpu", f.gpus, "only this GPU, by index or uuid (repeatable)");
      hold->add_flag("--now", f.now, "no grace period: stop the jobs at once");
    }
    hold->callback([&, verb = std::string(verb)] {
      f.run = [&, verb] {
        json body = json::object();
        if (!f.gpus.empty()) body["gpus"] = f.gpus;
        if (f.now) body["now"] = true;
        return CmdPostAndSay(g, "/v1/nodes/" + net::UrlEncode(f.target) + "/" + verb, body,
                             verb + " sent to node " + f.target +
                                 "'s agent; `gpupool events --node " + f.target +
                                 "` shows what it did");
      };
    });
  }
  auto* node_allow = global(node->add_subcommand("allow", "let a revoked node enroll again"));
  node_allow->add_option("name", f.target, "node name")->required();
  node_allow->callback([&] {
    f.run = [&] {
      return CmdPostAndSay(g, "/v1/nodes/" + net::UrlEncode(f.target) + "/allow", json::object(),
                           "node " + f.target + " may enroll again");
    };
  });
}

}  // namespace gpupool::cli
