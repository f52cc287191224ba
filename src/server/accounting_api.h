// AccountingApi: prices, accounts, the ledger and usage over REST
// (docs/api.md#accounting):
//
//   GET  /v1/prices                        the prices in force and every
//                                          version ever set (anyone signed in)
//   POST /v1/prices                        {"resource", "class", "price"}: a new
//                                          version from now on (admins)
//   POST /v1/prices/quote                  a job spec -> what it would cost per
//                                          hour (the range over the GPU classes
//                                          it may land on) and, with
//                                          max_runtime, at most
//   GET  /v1/accounts                      balances: an admin sees every
//                                          account, others their own and their
//                                          labs'
//   GET  /v1/accounts/{account}            one (the same rule)
//   POST /v1/accounts/{account}/credits    {"amount", "note"}: a grant (admins)
//   PUT  /v1/budgets/{account}             {"monthly", "action": "hold"|"stop"}
//                                          (admins); DELETE removes it
//   GET  /v1/ledger?account=&kind=&since=&until=&after=&limit=
//                                          entries, oldest first (one's own
//                                          accounts; admins any)
//   GET  /v1/statement?account=&month=2026-11
//                                          a month's statement: charges by job
//                                          and GPU class, lending credits
//                                          earned, grants, totals (the same
//                                          rule as the ledger)
//   GET  /v1/usage?by=&group=&user=&since=&until=
//                                          GPU-hours, CPU-hours and cost summed
//                                          per job, user, group, account, node,
//                                          model, day or month
//
// An account's answer carries its budget's standing when it has one
// ("budget": monthly, action, spent this month, percent, alert 75/90/100,
// at_limit, reason).
//
// Amounts travel twice: as a number of credits ("cost": 2.5, for people and
// plots) and exactly in micro-credits ("cost_micros": 2500000). Price
// changes, grants and budget changes are audited ("price.set",
// "credit.add", "budget.set", "budget.clear").
//
// Who sees what: a member sees her own user account and her labs'; her own
// usage, or a lab's she belongs to (every member's in it). Admins see all.
//
// Single-threaded: the server's event loop.
#pragma once

#include "server/accounting_service.h"
#include "server/api_module.h"
#include "server/auth.h"
#include "server/budget_keeper.h"

namespace gpupool::server {

class AccountingApi : public ApiModule {
 public:
  AccountingApi(Auth& auth, AccountingService& accounting, BudgetKeeper& budgets, Store& store,
                const Clock& clock)
      : auth_(auth), accounting_(accounting), budgets_(budgets), store_(store), clock_(clock) {}

  void AddRoutes(ApiRoutes& routes) override;

 private:
  void ListPrices(Respond respond);
  void SetPrice(const net::HttpRequest& req, const Principal& who, Respond respond);
  void Quote(const net::HttpRequest& req, Respond respond);
  void ListAccounts(const Principal& who, Respond respond);
  void GetAccount(const Principal& who, const std::string& account, Respond respond);
  void History(const net::HttpRequest& req, const Principal& who, const std::string& account,
               Respond respond);
  void AddCredits(const net::HttpRequest& req, const Principal& who, const std::string& account,
                  Respond respond);
  void Ledger(const net::HttpRequest& req, const Principal& who, Respond respond);
  void Usage(const net::HttpRequest& req, const Principal& who, Respond respond);
  void Statement(const net::HttpRequest& req, const Principal& who, Respond respond);
  void SetBudget(const net::HttpRequest& req, const Principal& who, const std::string& account,
                 Respond respond);
  // NotFound unless `account` is a lab's or a user's that exists.
  Status CheckAccountExists(const std::string& account);

  Auth& auth_;
  AccountingService& accounting_;
  BudgetKeeper& budgets_;
  Store& store_;
  const Clock& clock_;
};

}  // namespace gpupool::server
