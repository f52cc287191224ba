// The commands around money (docs/user-guide.md#paying-for-gpus):
//
//   gpupool balance                                   your accounts and your labs'
//   gpupool usage [--group G] [--user U] [--since T] [--until T] [--by KEY]
//                                                     GPU-hours, CPU-hours, cost
//   gpupool ledger --group G|--user U [--since T] [--until T] [--kind K]
//   gpupool invoice --group G|--user U --month 2026-11 [--html]
//                                                     a month's statement: jobs,
//                                                     GPU-hours, prices, lending
//                                                     credits, grants, total
//   gpupool admin price set [CLASS] PRICE [--resource gpu|cpu|memory|storage]
//   gpupool admin price list
//   gpupool admin credit add ACCOUNT AMOUNT [--note TEXT]
//   gpupool admin budget set ACCOUNT MONTHLY [--action hold|stop]
//   gpupool admin budget clear ACCOUNT
//
// Reports print a table, or with -o json the API's answer, or with -o csv
// the table as CSV. Times are dates (2026-11-01), durations back from now
// (30d) or milliseconds since the epoch.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "cli/commands.h"

namespace gpupool::cli {

struct MoneyFlags {
  std::function<int()> run;  // set by whichever of these commands was parsed
  std::string group, user, since, until, by = "user", kind, note, resource = "gpu", month;
  std::string action = "hold";
  bool html = false;
  std::vector<std::string> args;  // positional: [CLASS] PRICE, or ACCOUNT AMOUNT
};

void AddMoneyCommands(CLI::App& app, CLI::App& admin, GlobalFlags& g, MoneyFlags& f);

// The statement GET /v1/statement answered, as a self-contained HTML page
// made to be printed (or saved as PDF); every text from the ledger is
// escaped.
std::string StatementHtml(const nlohmann::json& statement);

// "vision" -> "group:vision"; "user:alice", "group:x" and "pool" as they are.
std::string AccountArg(const std::string& text);

}  // namespace gpupool::cli
