-- Alert economy (behaviour.md section 8): whether the error a snitch is in was announced,
-- and when its last recovery from an error was. Errors before this migration were always
-- announced.
ALTER TABLE snitch.snitches
    ADD COLUMN error_announced        boolean     NOT NULL DEFAULT true,
    ADD COLUMN last_recovery_alert_at timestamptz;
