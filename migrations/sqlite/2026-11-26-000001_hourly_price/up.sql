-- What each machine's instance costs, in US dollars an hour, as the cloud
-- priced its type at launch ("0.0416"); NULL without an instance.
ALTER TABLE machines ADD COLUMN hourly_price TEXT;
