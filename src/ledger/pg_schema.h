// The ledger's schema in PostgreSQL's dialect (internal to ledger/): the same tables, columns and
// rules as the SQLite schema (schema.cpp), enforced by the database for every writer. Tests read it
// to check a database's validator.
#pragma once

#include <string>
#include <vector>

namespace plumb::ledger::pg {

// A trigger function: CREATE FUNCTION <name>() RETURNS trigger LANGUAGE plpgsql AS $$<body>$$.
struct Function {
  std::string name;
  std::string body;  // pg_proc.prosrc after creation
};

// A trigger as pg_trigger records it: tgtype bits (1 row, 2 before, 4 insert, 8 delete, 16 update,
// 32 truncate), the table and the function it runs.
struct Trigger {
  std::string name;
  std::string table;
  int type = 0;
  std::string function;
};

// The schema version the PostgreSQL backend creates (the SQLite schema's current version; a
// PostgreSQL ledger is created at it, never migrated through earlier ones).
inline constexpr int kVersion = 4;

// The whole schema as one script: tables, the trigger functions and triggers below, the role
// plumb_writer (created when the connecting role may, granted SELECT and INSERT only), and the
// revocation of UPDATE, DELETE and TRUNCATE from PUBLIC. Run in one transaction on an empty schema.
std::string create_script();
// What takes a database created at schema `from` to kVersion, in one transaction: the tables,
// functions and triggers the later versions add or change. "" when there is no such upgrade (only
// v3 -> v4 is defined: a PostgreSQL ledger was first created at v3).
std::string upgrade_script(int from);
// The role plumb writes with, and the script that creates it (when it does not exist and the
// connecting role may create roles) and grants it SELECT and INSERT on the current schema's tables,
// after revoking UPDATE, DELETE and TRUNCATE from PUBLIC. `role` is a plain lower-case identifier.
// Safe to run from two databases of one cluster at once (pg_schema.cpp says how).
inline constexpr const char* kWriterRole = "plumb_writer";
std::string grants_sql(const std::string& role);
const std::vector<Function>& functions();
const std::vector<Trigger>& triggers();

// The shape create_script() gives the ledger's tables, as the catalog reports it, one line per
// column ("column TABLE.COLUMN TYPE[ NOT NULL]", type as format_type prints it) and per constraint
// ("constraint TABLE.NAME KIND", KIND one of check, foreign key, primary key, unique), sorted. A
// database whose tables differ (a dropped CHECK or NOT NULL, a retyped column) has lost part of
// its validator. A CHECK rewritten under its old name is not seen: expressions are printed
// differently by different PostgreSQL versions, so only names and kinds are compared.
// tests/ledger/shared_ledger_test.cpp checks this list against a freshly created ledger.
const std::vector<std::string>& catalog();

}  // namespace plumb::ledger::pg
