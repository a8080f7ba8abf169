//! Integration tests: one binary (each test binary links Lance), one module per area.
//! Every test uses real Lance datasets in a temporary directory.

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

mod actors;
mod branch_schema;
mod branches;
mod cli;
mod clients;
mod common;
mod connections;
#[path = "../support/content.rs"]
mod content;
mod cookbooks;
mod diff;
mod docs_examples;
mod durability;
mod explain;
mod export;
mod faults;
mod feed;
mod foundation;
mod group_commit;
mod history;
mod hostile;
mod index_fold;
mod indexes;
#[path = "../support/intercept.rs"]
mod intercept;
mod limits;
mod listings;
mod maintenance;
mod mcp;
mod memory;
mod merge;
mod operator;
mod policy;
mod publisher;
mod queries;
mod reference_cli;
mod refs;
mod revert;
#[path = "../support/s3.rs"]
mod s3;
mod s3_graphs;
mod schema;
#[path = "../support/scratch.rs"]
mod scratch;
mod search;
mod server;
mod source_rules;
mod stored_queries;
mod strace;
mod traversals;
mod undo;
mod writes;
