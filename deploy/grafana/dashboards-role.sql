-- The read-only role of the dashboards and a login for Grafana: run once per cluster by a user
-- with CREATEROLE, before the migrations (0008_dashboard_views grants the role the views of the
-- schema it migrates; run after them, also run the two GRANTs below per projection schema).
-- docker-compose.yml runs it as the image's first-start script. Change the password.
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'devicestate_dashboards') THEN
    CREATE ROLE devicestate_dashboards NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'grafana') THEN
    CREATE ROLE grafana LOGIN PASSWORD 'grafana' IN ROLE devicestate_dashboards;
  END IF;
END $$;
-- Views of a schema migrated before the role existed (public: the default projection schema):
--   GRANT USAGE ON SCHEMA public_views TO devicestate_dashboards;
--   GRANT SELECT ON ALL TABLES IN SCHEMA public_views TO devicestate_dashboards;
