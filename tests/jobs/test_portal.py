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
