DROP TABLE IF EXISTS courier_bundles;
DROP TABLE IF EXISTS courier_receipts;
