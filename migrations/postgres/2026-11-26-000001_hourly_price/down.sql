ALTER TABLE machines DROP COLUMN hourly_price;
