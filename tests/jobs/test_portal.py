from tests.factories import JobFactory


def test_it_shows_a_landing_page_to_visitors(client, db):
    page = client.get("/")

    assert page.status_code == 200
    assert "Log in" in page.text


def test_it_lists_the_jobs_of_the_users_tenants(client, alpha, alice, bob):
    JobFactory(tenant=alpha, owner=alice, name="alice-train")
    client.force_login(bob)

    page = client.get("/")

    assert "alice-train" in page.text


def test_it_hides_other_tenants_jobs(client, alpha, alice, charlie):
    JobFactory(tenant=alpha, owner=alice, name="alice-train")
    client.force_login(charlie)

    page = client.get("/")

    assert "alice-train" not in page.text
    assert "No jobs yet." in page.text


def test_a_team_mate_sees_a_jobs_page(client, alpha, alice, bob):
    job = JobFactory(tenant=alpha, owner=alice, name="alice-train")
    client.force_login(bob)

    page = client.get(f"/jobs/{job.pk}/")

    assert page.status_code == 200
    assert "alice-train" in page.text


def test_another_tenants_job_page_is_a_404(client, alpha, alice, charlie):
    job = JobFactory(tenant=alpha, owner=alice)
    client.force_login(charlie)

    assert client.get(f"/jobs/{job.pk}/").status_code == 404


def test_a_visitor_is_sent_to_log_in_for_a_job_page(client, alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice)

    page = client.get(f"/jobs/{job.pk}/")

    assert page.status_code == 302
    assert page.url.startswith("/accounts/login/")
