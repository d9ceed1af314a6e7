DROP TABLE checkpoint_ledger;
