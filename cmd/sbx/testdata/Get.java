// The Java client of cmd/sbx's TLS inspection tests, run as a single-file
// program (java Get.java URL): it trusts the sandbox's CA through the
// truststore JAVA_TOOL_OPTIONS names.
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

public class Get {
    public static void main(String[] args) throws Exception {
        HttpClient c = HttpClient.newBuilder().proxy(HttpClient.Builder.NO_PROXY).build();
        HttpResponse<String> r = c.send(HttpRequest.newBuilder(URI.create(args[0])).build(), HttpResponse.BodyHandlers.ofString());
        System.out.print(r.statusCode() + " " + r.body());
    }
}
