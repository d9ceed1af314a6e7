DROP TABLE things;
