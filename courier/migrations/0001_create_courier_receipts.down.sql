DROP TABLE IF EXISTS courier_receipts;
