#include "cli/money_commands.h"

#include <iostream>

#include "cli/command_util.h"
#include "cli/table.h"
#include "common/markup.h"
#include "common/money.h"
#include "net/http.h"

namespace gpupool::cli {

using nlohmann::json;

namespace {

// "2.50" from {"<name>_micros": 2500000}: exact, as the server keeps it.
std::string Credits(const json& j, const std::string& name) {
  return accounting::FormatCredits(Int(j, (name + "_micros").c_str()));
}

std::string Hours(const json& j, const char* key) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", j.contains(key) ? j[key].get<double>() : 0.0);
  return buf;
}

void AddQuery(std::string& path, const char* name, const std::string& value) {
  if (value.empty()) return;
  path += (path.find('?') == std::string::npos ? "?" : "&");
  path += std::string(name) + "=" + net::UrlEncode(value);
}

// Prints `t` as the output flag asks (json prints `raw` instead).
int Print(const GlobalFlags& g, const Table& t, const json& raw) {
  if (g.output == "json") {
    std::cout << raw.dump(2) << "\n";
  } else if (g.output == "csv") {
    t.PrintCsv(std::cout);
  } else {
    t.Print(std::cout);
  }
  return 0;
}

// "spent 80.00 of 100.00 in 2026-11 (80%), then stop: over 75%", "up to
// its balance, then hold: AT ITS LIMIT", or "-" without a budget.
std::string BudgetText(const json& account) {
  if (!account.contains("budget") || !account["budget"].is_object()) return "-";
  const json& b = account["budget"];
  std::string text = Int(b, "monthly_micros") > 0
                         ? "spent " + Credits(b, "spent") + " of " + Credits(b, "monthly") +
                               " in " + Str(b, "month") + " (" + std::to_string(Int(b, "percent")) +
                               "%)"
                         : "up to its balance";
  text += ", then " + Str(b, "action");
  if (b.value("at_limit", false)) {
    text += ": AT ITS LIMIT";
  } else if (Int(b, "alert") > 0) {
    text += ": over " + std::to_string(Int(b, "alert")) + "%";
  }
  return text;
}

int CmdBalance(const GlobalFlags& g) {
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Get("/v1/accounts");
  if (!r.ok()) return ReportError(r.status());
  Table t({"ACCOUNT", "BALANCE", "POSTED", "ACCRUING", "BUDGET"});
  for (const json& a : (*r)["accounts"]) {
    t.Add({Str(a, "account"), Credits(a, "balance"), Credits(a, "posted"), Credits(a, "accruing"),
           BudgetText(a)});
  }
  return Print(g, t, *r);
}

int CmdBudget(const GlobalFlags& g, const MoneyFlags& f, bool clear) {
  if (f.args.size() != (clear ? 1u : 2u)) {
    return ReportError(Status::InvalidArgument(
        clear ? "give the account: budget clear vision"
              : "give the account and its monthly amount: budget set vision 1000 --action stop "
                "(0: no monthly cap, only its balance)"));
  }
  std::string account = AccountArg(f.args[0]);
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  std::string target = "/v1/budgets/" + net::UrlEncode(account);
  auto r = clear ? api->Delete(target)
                 : api->Put(target, {{"monthly", f.args[1]}, {"action", f.action}});
  if (!r.ok()) return ReportError(r.status());
  if (g.output == "json") {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  std::cout << account << ": " << (clear ? "no budget" : BudgetText(*r)) << "\n";
  return 0;
}

int CmdUsage(const GlobalFlags& g, const MoneyFlags& f) {
  std::string path = "/v1/usage";
  AddQuery(path, "by", f.by);
  AddQuery(path, "group", f.group);
  AddQuery(path, "user", f.user);
  AddQuery(path, "since", f.since);
  AddQuery(path, "until", f.until);
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Get(path, 120'000);
  if (!r.ok()) return ReportError(r.status());
  std::string key = f.by;
  for (char& c : key) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  Table t({key, "GPU_HOURS", "CPU_HOURS", "COST"});
  for (const json& row : (*r)["rows"]) {
    std::string k = Str(row, "key");
    if (k.empty()) k = f.by == "model" ? "(unpriced)" : "-";
    t.Add({k, Hours(row, "gpu_hours"), Hours(row, "cpu_hours"), Credits(row, "cost")});
  }
  const json& total = (*r)["total"];
  if (g.output != "csv") {
    t.Add({"total", Hours(total, "gpu_hours"), Hours(total, "cpu_hours"), Credits(total, "cost")});
  }
  return Print(g, t, *r);
}

int CmdLedger(const GlobalFlags& g, const MoneyFlags& f) {
  if (!f.group.empty() && !f.user.empty()) {
    return ReportError(Status::InvalidArgument("give --group or --user, not both"));
  }
  std::string path = "/v1/ledger";
  AddQuery(path, "account",
           !f.group.empty()  ? "group:" + f.group
           : !f.user.empty() ? "user:" + f.user
                             : "");
  AddQuery(path, "kind", f.kind);
  AddQuery(path, "since", f.since);
  AddQuery(path, "until", f.until);
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  Table t({"ID", "AT_MS", "KIND", "DEBIT", "CREDIT", "AMOUNT", "JOB", "ATTEMPT", "CLASS",
           "GPU_HOURS", "NOTE"});
  json all = json::array();
  std::string page = path;
  while (true) {  // every page
    auto r = api->Get(page);
    if (!r.ok()) return ReportError(r.status());
    for (const json& e : (*r)["entries"]) {
      bool grant = Str(e, "kind") == "grant";
      t.Add({std::to_string(Int(e, "id")), std::to_string(Int(e, "at_ms")), Str(e, "kind"),
             Str(e, "debit"), Str(e, "credit"), Credits(e, "amount"),
             grant ? "" : std::to_string(Int(e, "job_id")), Str(e, "attempt"), Str(e, "class"),
             grant ? "" : Hours(e, "gpu_hours"), Str(e, "note")});
      all.push_back(e);
    }
    if (!r->contains("next_after")) break;
    page = path;
    AddQuery(page, "after", std::to_string((*r)["next_after"].get<int64_t>()));
  }
  return Print(g, t, json{{"entries", all}});
}

int CmdPriceList(const GlobalFlags& g) {
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Get("/v1/prices");
  if (!r.ok()) return ReportError(r.status());
  static const std::map<std::string, std::string> kUnit = {
      {"gpu", "GPU-hour"}, {"cpu", "CPU-hour"}, {"memory", "GiB-hour"}, {"storage", "GiB-month"}};
  Table t({"RESOURCE", "CLASS", "PRICE", "PER", "SINCE_MS", "SET_BY"});
  for (const json& p : (*r)["prices"]) {
    auto unit = kUnit.find(Str(p, "resource"));
    t.Add({Str(p, "resource"), Str(p, "class"), Credits(p, "price"),
           unit == kUnit.end() ? "" : unit->second, std::to_string(Int(p, "from_ms")),
           Str(p, "set_by")});
  }
  return Print(g, t, *r);
}

int CmdPriceSet(const GlobalFlags& g, const MoneyFlags& f) {
  bool gpu = f.resource == "gpu";
  if (f.args.size() != (gpu ? 2u : 1u)) {
    return ReportError(Status::InvalidArgument(
        gpu ? "give the GPU class and its price per GPU-hour: price set A100 2.50"
            : "give only the price: price set --resource " + f.resource + " 0.05"));
  }
  json body = {{"resource", f.resource}, {"price", f.args.back()}};
  if (gpu) body["class"] = f.args[0];
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Post("/v1/prices", body);
  if (!r.ok()) return ReportError(r.status());
  if (g.output == "json") {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  std::cout << Str(*r, "resource") << (gpu ? " " + Str(*r, "class") : "") << ": "
            << Credits(*r, "price") << " credits from now on (version " << Int(*r, "id") << ")\n";
  return 0;
}

int CmdCreditAdd(const GlobalFlags& g, const MoneyFlags& f) {
  if (f.args.size() != 2) {
    return ReportError(Status::InvalidArgument(
        "give the account and the amount: credit add vision 1000 (a lab), user:alice 50"));
  }
  std::string account = AccountArg(f.args[0]);
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Post("/v1/accounts/" + net::UrlEncode(account) + "/credits",
                     {{"amount", f.args[1]}, {"note", f.note}});
  if (!r.ok()) return ReportError(r.status());
  if (g.output == "json") {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  auto now = api->Get("/v1/accounts/" + net::UrlEncode(account));
  std::cout << "granted " << Credits(*r, "amount") << " credits to " << account;
  if (now.ok()) std::cout << "; its balance is " << Credits(*now, "balance");
  std::cout << "\n";
  return 0;
}

int CmdInvoice(const GlobalFlags& g, const MoneyFlags& f) {
  if (f.group.empty() == f.user.empty()) {
    return ReportError(Status::InvalidArgument("give --group LAB or --user NAME"));
  }
  std::string path = "/v1/statement";
  AddQuery(path, "account", f.group.empty() ? "user:" + f.user : "group:" + f.group);
  AddQuery(path, "month", f.month);
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Get(path, 120'000);
  if (!r.ok()) return ReportError(r.status());
  if (f.html) {
    std::cout << StatementHtml(*r);
    return 0;
  }
  const json& s = *r;
  Table t({"JOB", "USER", "CLASS", "GPU_HOURS", "COST"});
  for (const json& j : s["jobs"]) {
    t.Add({std::to_string(Int(j, "job_id")), Str(j, "user"), Str(j, "class"), Hours(j, "gpu_hours"),
           Credits(j, "cost")});
  }
  if (g.output == "csv") {
    const json& tot = s["totals"];
    t.Add({"lending credits earned", "", "", Hours(s["lending"], "gpu_hours"),
           "-" + Credits(s["lending"], "earned")});
    t.Add({"credits granted", "", "", "", "-" + Credits(tot, "granted")});
    t.Add({"total charged", "", "", Hours(tot, "gpu_hours"), Credits(tot, "charged")});
    t.PrintCsv(std::cout);
    return 0;
  }
  if (g.output == "json") return Print(g, t, s);
  std::cout << "Statement of " << Str(s, "account") << " for " << Str(s, "month") << "\n\n";
  t.Print(std::cout);
  const json& tot = s["totals"];
  std::cout << "\ncharged " << Credits(tot, "charged") << " for " << Hours(tot, "gpu_hours")
            << " GPU-hours; earned " << Credits(tot, "earned") << " by lending; granted "
            << Credits(tot, "granted") << "; net " << Credits(tot, "net") << "\n";
  if (s.contains("balance_now_micros"))
    std::cout << "balance now: " << Credits(s, "balance_now") << "\n";
  return 0;
}

}  // namespace

std::string StatementHtml(const json& s) {
  auto esc = [](const std::string& text) { return XmlEscape(text); };
  std::string title = "Statement of " + Str(s, "account") + " for " + Str(s, "month");
  std::string h = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" +
                  esc(title) +
                  "</title>\n<style>body{font:14px/1.4 system-ui,sans-serif;margin:2em}"
                  "table{border-collapse:collapse;margin:1em 0}td,th{border-bottom:1px solid #ccc;"
                  "padding:.3em .8em;text-align:left}td.n,th.n{text-align:right}"
                  "@media print{body{margin:0}}</style></head><body>\n<h1>" +
                  esc(title) + "</h1>\n";
  h += "<h2>Jobs</h2>\n<table><tr><th>Job</th><th>User</th><th>GPU class</th>"
       "<th class=\"n\">GPU-hours</th><th class=\"n\">Cost</th></tr>\n";
  for (const json& j : s["jobs"]) {
    h += "<tr><td>" + std::to_string(Int(j, "job_id")) + "</td><td>" + esc(Str(j, "user")) +
         "</td><td>" + esc(Str(j, "class")) + "</td><td class=\"n\">" + Hours(j, "gpu_hours") +
         "</td><td class=\"n\">" + Credits(j, "cost") + "</td></tr>\n";
  }
  h += "</table>\n<h2>By GPU class</h2>\n<table><tr><th>GPU class</th><th class=\"n\">GPU-hours"
       "</th><th class=\"n\">Cost</th><th class=\"n\">Per GPU-hour</th></tr>\n";
  for (const json& c : s["classes"]) {
    double hours = c.value("gpu_hours", 0.0);
    char per[32] = "-";
    if (hours > 0) std::snprintf(per, sizeof per, "%.4f", c.value("cost", 0.0) / hours);
    h += "<tr><td>" + esc(Str(c, "class").empty() ? "(unpriced)" : Str(c, "class")) +
         "</td><td class=\"n\">" + Hours(c, "gpu_hours") + "</td><td class=\"n\">" +
         Credits(c, "cost") + "</td><td class=\"n\">" + per + "</td></tr>\n";
  }
  h += "</table>\n<h2>Credits</h2>\n<table><tr><th>When (ms)</th><th>What</th><th>By</th>"
       "<th class=\"n\">Amount</th></tr>\n";
  h += "<tr><td></td><td>earned by lending (" + Hours(s["lending"], "gpu_hours") +
       " GPU-hours served)</td><td></td><td class=\"n\">" + Credits(s["lending"], "earned") +
       "</td></tr>\n";
  for (const json& gr : s["grants"]) {
    h += "<tr><td>" + std::to_string(Int(gr, "at_ms")) + "</td><td>grant: " + esc(Str(gr, "note")) +
         "</td><td>" + esc(Str(gr, "actor")) + "</td><td class=\"n\">" + Credits(gr, "amount") +
         "</td></tr>\n";
  }
  const json& tot = s["totals"];
  h += "</table>\n<h2>Total</h2>\n<table>"
       "<tr><td>charged</td><td class=\"n\">" +
       Credits(tot, "charged") +
       "</td></tr>"
       "<tr><td>earned by lending</td><td class=\"n\">" +
       Credits(tot, "earned") +
       "</td></tr>"
       "<tr><td>granted</td><td class=\"n\">" +
       Credits(tot, "granted") +
       "</td></tr>"
       "<tr><th>net</th><th class=\"n\">" +
       Credits(tot, "net") + "</th></tr></table>\n";
  if (s.contains("balance_now_micros"))
    h += "<p>Balance now: " + Credits(s, "balance_now") + " credits.</p>\n";
  return h + "</body></html>\n";
}

std::string AccountArg(const std::string& text) {
  if (text == "pool" || text.rfind("group:", 0) == 0 || text.rfind("user:", 0) == 0) return text;
  return "group:" + text;
}

void AddMoneyCommands(CLI::App& app, CLI::App& admin, GlobalFlags& g, MoneyFlags& f) {
  auto* balance = app.add_subcommand("balance", "your balance and your labs': credits");
  balance->fallthrough();
  balance->callback([&] { f.run = [&] { return CmdBalance(g); }; });

  auto times = [&](CLI::App* c) {
    c->add_option("--since", f.since, "from (2026-11-01, 30d back, or ms since the epoch)");
    c->add_option("--until", f.until, "until, the same forms (default: now)");
  };
  auto* usage = app.add_subcommand("usage", "GPU-hours, CPU-hours and cost, summed by a key");
  usage->fallthrough();
  usage->add_option("--group", f.group, "a lab's (its members' jobs charged to it)");
  usage->add_option("--user", f.user, "a user's (admins: anyone's; others: their own)");
  usage->add_option("--by", f.by, "job, user, group, account, node, model, day or month")
      ->check(CLI::IsMember({"job", "user", "group", "account", "node", "model", "day", "month"}));
  times(usage);
  usage->callback([&] { f.run = [&] { return CmdUsage(g, f); }; });

  auto* ledger = app.add_subcommand("ledger", "an account's ledger entries, oldest first");
  ledger->fallthrough();
  ledger->add_option("--group", f.group, "a lab's account");
  ledger->add_option("--user", f.user, "a user's account (for jobs of no lab)");
  ledger->add_option("--kind", f.kind, "charge, lending or grant")
      ->check(CLI::IsMember({"charge", "lending", "grant"}));
  times(ledger);
  ledger->callback([&] { f.run = [&] { return CmdLedger(g, f); }; });

  auto* invoice = app.add_subcommand(
      "invoice", "a month's statement of a lab or a user: jobs, hours, prices, credits, total");
  invoice->fallthrough();
  invoice->add_option("--group", f.group, "the lab");
  invoice->add_option("--user", f.user, "the user (jobs of no lab)");
  invoice->add_option("--month", f.month, "e.g. 2026-11 (UTC)")->required();
  invoice->add_flag("--html", f.html, "a self-contained HTML page, ready to print or save as PDF");
  invoice->callback([&] { f.run = [&] { return CmdInvoice(g, f); }; });

  auto* price = admin.add_subcommand("price", "prices per GPU class, CPU, memory, storage");
  price->require_subcommand(1);
  auto* plist = price->add_subcommand("list", "the prices in force");
  plist->fallthrough();
  plist->callback([&] { f.run = [&] { return CmdPriceList(g); }; });
  auto* pset = price->add_subcommand(
      "set", "a new price from now on: CLASS PRICE (credits per GPU-hour), or --resource R PRICE");
  pset->fallthrough();
  pset->add_option("--resource", f.resource,
                   "gpu (per GPU-hour, the default), cpu (per CPU-hour), memory (per "
                   "GiB-hour), storage (per GiB-month of checkpoints)")
      ->check(CLI::IsMember({"gpu", "cpu", "memory", "storage"}));
  pset->add_option("args", f.args, "[CLASS] PRICE")->required();
  pset->callback([&] { f.run = [&] { return CmdPriceSet(g, f); }; });

  auto* budget = admin.add_subcommand("budget", "budgets of labs and users");
  budget->require_subcommand(1);
  auto* bset = budget->add_subcommand(
      "set",
      "ACCOUNT MONTHLY: at most MONTHLY credits a month (0: none) and never more than "
      "its balance");
  bset->fallthrough();
  bset->add_option("args", f.args, "ACCOUNT MONTHLY")->required();
  bset->add_option("--action", f.action,
                   "at the limit: hold (new jobs wait, the default) or stop (running jobs "
                   "checkpoint, stop and wait too)")
      ->check(CLI::IsMember({"hold", "stop"}));
  bset->callback([&] { f.run = [&] { return CmdBudget(g, f, false); }; });
  auto* bclear = budget->add_subcommand("clear", "ACCOUNT: no budget (no limit)");
  bclear->fallthrough();
  bclear->add_option("args", f.args, "ACCOUNT")->required();
  bclear->callback([&] { f.run = [&] { return CmdBudget(g, f, true); }; });

  auto* credit = admin.add_subcommand("credit", "grant credits to a lab or a user");
  credit->require_subcommand(1);
  auto* cadd = credit->add_subcommand("add", "ACCOUNT AMOUNT: a lab's name, or user:NAME");
  cadd->fallthrough();
  cadd->add_option("args", f.args, "ACCOUNT AMOUNT")->required();
  cadd->add_option("--note", f.note, "why (kept in the ledger and the audit log)");
  cadd->callback([&] { f.run = [&] { return CmdCreditAdd(g, f); }; });
}

}  // namespace gpupool::cli
