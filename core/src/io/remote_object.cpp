// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/io/remote_object.h"
#include "optscope/base/display_text.h"
#include "optscope/base/error.h"
#include "optscope/base/look_ahead.h"
#include "optscope/base/progress.h"
#include "optscope/io/block_map.h"
#include "optscope/io/fault_injection.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/output_journal.h"
#include "optscope/io/remote_requests.h"
#include "optscope/io/sha256.h"

#include <climits>
#include <curl/curl.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace optscope {

namespace {

std::atomic<uint64_t> g_requests {0}, g_bytes {0}, g_retries {0};
std::atomic<uint64_t> g_readFailures {0};
/// reads given up since the last request answered well: while the store keeps failing, a request is tried twice, not
/// kAttempts times (a diff of 75 items over a store answering 500 ran for minutes, each read retrying on its own)
std::atomic<uint64_t> g_failingStreak {0};
std::mutex g_readFailureMutex;
std::string g_firstReadFailure; ///< remoteTransferStats().firstReadFailure

std::mutex g_unpinnedMutex;
std::set<std::string> g_unpinned; ///< remoteTransferStats().unpinnedObjects: the objects' shown URLs, each once

/// an object read with neither an ETag nor a usable Last-Modified to hold its reads to: a change while it is read
/// cannot be seen, which the user is told (remoteTransferStats) rather than left to trust
void noteUnpinned(const std::string& shown)
{
    std::lock_guard<std::mutex> lock(g_unpinnedMutex);
    g_unpinned.insert(shown);
}

/// an object's bytes could not be read (after the retries): counted, the first one's text kept
void noteReadFailure(const std::string& what)
{
    g_failingStreak.fetch_add(1);
    if (g_readFailures.fetch_add(1) > 0) return;
    std::lock_guard<std::mutex> lock(g_readFailureMutex);
    g_firstReadFailure = what;
}
std::atomic<int> g_inFlight {0};
std::atomic<bool> g_abandoned {false}; ///< abandonRemoteRequests(): no request runs any more
std::atomic<int> g_openObjects {0}; ///< RemoteObjects alive: a scan's read-ahead shrinks as they grow in number
/// bytes of fetched blocks the process holds (not given back yet), and the most it held
std::atomic<int64_t> g_held {0};
std::atomic<int64_t> g_peakHeld {0};
/// bytes of objects held whole because their server serves no ranges (RemoteObject::holdWhole), all open ones
std::atomic<uint64_t> g_heldWhole {0};

void addHeld(int64_t bytes)
{
    const int64_t now = g_held.fetch_add(bytes) + bytes;
    for (int64_t peak = g_peakHeld.load(); now > peak && !g_peakHeld.compare_exchange_weak(peak, now);) { }
}

/// An object whose queued read-ahead hints the process's background fetchers serve.
class FetchClient
{
public:
    /// fetches the queued hints until none is left or the object closes; ends with FetcherPool::left() under the
    /// object's lock (its last touch of the object)
    virtual void serveHints() const = 0;

protected:
    ~FetchClient() = default;

private:
    friend class FetcherPool;
    mutable int m_asked = 0; ///< the client's places in the pool's queue (under the pool's lock)
    mutable int m_serving = 0; ///< fetchers inside its serveHints (under the pool's lock)
};

/// The process's background fetchers, shared by every remote object: a read ahead across 1,024 rank files must not
/// start 4,096 threads and connections, and a hint past the cap must not wait for its own read (it did while each
/// object had its own threads: a diagnose sampling 1,024 files ran at the pace of the reads). At most kMaxFetchers
/// threads, each taking the next object that asked, in the order they asked; a thread ends when none is waiting.
/// Lock order: an object's lock, then the pool's.
class FetcherPool
{
public:
    static FetcherPool& instance()
    {
        static FetcherPool* pool = new FetcherPool; // never destroyed: a detached fetcher may outlive the statics
        return *pool;
    }
    /// one more fetcher for @p c, unless it has @p perClient asked or serving already (call with c's lock held, after
    /// queueing the hint: a fetcher leaving c under c's lock has seen the hint, or will be replaced here)
    void ask(const FetchClient& c, int perClient)
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        if (c.m_asked + c.m_serving >= perClient) return;
        ++c.m_asked;
        m_waiting.push_back(&c);
        if (m_threads - m_busy < int(m_waiting.size()) && m_threads < kMaxFetchers) {
            ++m_threads;
            std::thread([this] { run(); }).detach();
        }
    }
    /// a fetcher leaves @p c (call with c's lock held, after seeing c's hints all taken)
    void left(const FetchClient& c)
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        --c.m_serving;
        --m_busy;
        m_left.notify_all();
    }
    /// @p c is going away (its hints dropped, its transfers told to stop): its places in the queue are given up and
    /// its fetchers waited for. Call without c's lock, then take and release c's lock once (the last fetcher's
    /// unlock).
    void forget(const FetchClient& c)
    {
        std::unique_lock<std::mutex> lock(m_mutex);
        if (c.m_asked) {
            m_waiting.erase(std::remove(m_waiting.begin(), m_waiting.end(), &c), m_waiting.end());
            c.m_asked = 0;
        }
        m_left.wait(lock, [&] { return c.m_serving == 0; });
    }
    static constexpr int kMaxFetchers = 64;

private:
    void run()
    {
        std::unique_lock<std::mutex> lock(m_mutex);
        while (!m_waiting.empty()) {
            const FetchClient* c = m_waiting.front();
            m_waiting.pop_front();
            --c->m_asked;
            ++c->m_serving;
            ++m_busy;
            lock.unlock();
            c->serveHints();
            lock.lock();
        }
        --m_threads;
    }
    std::mutex m_mutex;
    std::condition_variable m_left; ///< a fetcher left its object
    std::deque<const FetchClient*> m_waiting; ///< objects that asked for a fetcher, oldest first (an object per place)
    int m_threads = 0, m_busy = 0; ///< fetcher threads; of them, inside an object's serveHints
};

constexpr uint64_t kBlock = uint64_t(64) << 10; // the unit a RemoteObject fetches and remembers
constexpr uint64_t kPart = uint64_t(8) << 20; // the largest single ranged GET
constexpr int kParallel = 16; // ranged GETs in flight per fetch
constexpr int kAttempts = 6; // a request's tries before its failure is reported
const char* const kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string env(const char* name)
{
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

// ---- configuration: endpoint, region, credentials (read once) -------------------------------------------------------

struct IniFile
{
    std::map<std::string, std::map<std::string, std::string>> sections;
    static IniFile read(const std::string& path)
    {
        IniFile f;
        std::ifstream in(path);
        std::string line, section;
        auto trim = [](std::string s) {
            const auto b = s.find_first_not_of(" \t\r");
            const auto e = s.find_last_not_of(" \t\r");
            return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
        };
        while (std::getline(in, line)) {
            line = trim(line);
            if (line.empty() || line[0] == '#' || line[0] == ';') continue;
            if (line.front() == '[' && line.back() == ']') {
                section = trim(line.substr(1, line.size() - 2));
                continue;
            }
            const auto eq = line.find('=');
            if (eq != std::string::npos) f.sections[section][trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
        }
        return f;
    }
    std::string get(const std::string& section, const std::string& key) const
    {
        auto s = sections.find(section);
        if (s == sections.end()) return {};
        auto k = s->second.find(key);
        return k == s->second.end() ? std::string() : k->second;
    }
};

struct StoreConfig
{
    std::string endpoint; ///< empty: AWS's own, virtual-hosted
    std::string endpointSource; ///< where endpoint came from ("AWS_ENDPOINT_URL"), for messages
    /// gs://: Google's XML API, or the emulator that STORAGE_EMULATOR_HOST names (Google's own client libraries
    /// honour that variable the same way), path-style
    std::string gsEndpoint = "https://storage.googleapis.com";
    std::string region = "us-east-1";
    /// how an s3:// object's URL names its bucket (the profile's `s3 = addressing_style = ...`, as botocore reads
    /// it): Auto (AWS: virtual-hosted where the name allows, awsObjectUrl; another endpoint: path-style), Path
    /// (ENDPOINT/BUCKET/KEY), Virtual (BUCKET.ENDPOINT-HOST/KEY: stores that serve buckets as host names only)
    enum class Addressing { Auto, Path, Virtual } addressing = Addressing::Auto;
    std::string accessKey, secretKey, sessionToken;
    std::string caFile;
    long stallSeconds = 30;
    /// credentials that cannot be used as given (a profile no file holds, a key without its secret): every s3:// or
    /// gs:// URL is refused with it, as boto3 refuses to start, rather than sent unsigned or half-signed
    std::string problem;
};

const StoreConfig& storeConfig()
{
    static const StoreConfig c = [] {
        StoreConfig c;
        const std::string home = env("HOME");
        // botocore's order: AWS_PROFILE, then AWS_DEFAULT_PROFILE
        const char* const profileVariable = !env("AWS_PROFILE").empty() ? "AWS_PROFILE"
            : !env("AWS_DEFAULT_PROFILE").empty()                       ? "AWS_DEFAULT_PROFILE"
                                                                        : nullptr;
        const std::string profile = profileVariable ? env(profileVariable) : "default";
        const std::string credPath = env("AWS_SHARED_CREDENTIALS_FILE").empty() ? home + "/.aws/credentials"
                                                                                : env("AWS_SHARED_CREDENTIALS_FILE");
        const std::string confPath = env("AWS_CONFIG_FILE").empty() ? home + "/.aws/config" : env("AWS_CONFIG_FILE");
        const IniFile creds = IniFile::read(credPath);
        const IniFile conf = IniFile::read(confPath);
        const std::string confSection = profile == "default" ? "default" : "profile " + profile;
        c.accessKey = env("AWS_ACCESS_KEY_ID");
        c.secretKey = env("AWS_SECRET_ACCESS_KEY");
        c.sessionToken = env("AWS_SESSION_TOKEN");
        if (c.accessKey.empty()) {
            c.accessKey = creds.get(profile, "aws_access_key_id");
            c.secretKey = creds.get(profile, "aws_secret_access_key");
            c.sessionToken = creds.get(profile, "aws_session_token");
            if (!c.accessKey.empty() && c.secretKey.empty())
                c.problem = "the profile '" + profile + "' in " + credPath
                    + " has an aws_access_key_id but no aws_secret_access_key";
        } else if (c.secretKey.empty()) {
            c.problem = "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not: set both (or neither, to use a "
                        "profile)";
        }
        if (profileVariable && !creds.sections.count(profile) && !conf.sections.count(confSection))
            c.problem = "the config profile '" + profile + "' (" + profileVariable + ") is in neither " + credPath
                + " nor " + confPath + ": name a profile one of them holds, or unset " + profileVariable;
        for (const std::string& r : {env("AWS_REGION"), env("AWS_DEFAULT_REGION"), conf.get(confSection, "region")})
            if (!r.empty()) {
                c.region = r;
                break;
            }
        const std::pair<std::string, std::string> endpoints[]
            = {{env("AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3"}, {env("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"},
                {conf.get(confSection, "endpoint_url"), "endpoint_url in " + confPath}};
        for (const auto& [e, source] : endpoints)
            if (!e.empty()) {
                c.endpoint = e;
                c.endpointSource = source;
                break;
            }
        while (!c.endpoint.empty() && c.endpoint.back() == '/')
            c.endpoint.pop_back();
        // botocore nests it under "s3 =" in the profile; the indented line reads as the profile's own key here
        if (const std::string style = conf.get(confSection, "addressing_style"); style == "path")
            c.addressing = StoreConfig::Addressing::Path;
        else if (style == "virtual")
            c.addressing = StoreConfig::Addressing::Virtual;
        else if (!style.empty() && style != "auto")
            c.problem = "addressing_style in the profile '" + profile + "' of " + confPath + " is '" + style
                + "': auto, path or virtual (as the AWS CLI takes it)";
        if (std::string g = env("STORAGE_EMULATOR_HOST"); !g.empty()) {
            if (g.find("://") == std::string::npos) g = "http://" + g; // "host:port", as Google's libraries take it
            while (g.back() == '/')
                g.pop_back();
            c.gsEndpoint = g;
        }
        for (const std::string& f : {env("CURL_CA_BUNDLE"), env("AWS_CA_BUNDLE"), env("SSL_CERT_FILE")})
            if (!f.empty()) {
                c.caFile = f;
                break;
            }
        if (const std::string s = env("OPTSCOPE_REMOTE_STALL_SECONDS"); !s.empty())
            c.stallSeconds = std::max(1L, std::strtol(s.c_str(), nullptr, 10));
        curl_global_init(CURL_GLOBAL_DEFAULT);
        return c;
    }();
    return c;
}

// ---- URLs -----------------------------------------------------------------------------------------------------------

/// the metadata a created-only-if-new object carries (ObjectUpload::createOnlyNew): which run wrote it (GCS answers
/// its own spelling, x-goog-meta-)
constexpr const char* kWriterTagHeader = "x-amz-meta-optscope-writer";
constexpr const char* kGcsWriterTagHeader = "x-goog-meta-optscope-writer";

struct RemoteUrl
{
    enum Scheme { S3, Gs, Http } scheme = Http;
    std::string bucket, key; ///< S3 and GCS
    std::string http; ///< the URL as given (HTTP)
};

bool startsWith(const std::string& s, const char* p)
{
    return s.compare(0, std::strlen(p), p) == 0;
}

RemoteUrl parseUrl(const std::string& url)
{
    RemoteUrl u;
    if (startsWith(url, "s3://") || startsWith(url, "gs://")) {
        u.scheme = startsWith(url, "s3://") ? RemoteUrl::S3 : RemoteUrl::Gs;
        const std::string rest = url.substr(5);
        const auto slash = rest.find('/');
        u.bucket = rest.substr(0, slash);
        u.key = slash == std::string::npos ? std::string() : rest.substr(slash + 1);
        if (u.bucket.empty()) throw Error(ErrorKind::Usage, url, "names no bucket (expected s3://BUCKET/KEY)");
        if (const std::string& problem = storeConfig().problem; !problem.empty())
            throw Error(ErrorKind::Usage, url, problem);
        return u;
    }
    u.http = url;
    return u;
}

/// RFC 3986 percent-encoding of a key, '/' kept (what SigV4's canonical URI expects for S3)
std::string encodeKey(const std::string& key, bool keepSlash = true)
{
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (const unsigned char c : key) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keepSlash && c == '/'))
            out += static_cast<char>(c);
        else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

/// "?a=1&b=2": the query of an S3 or GCS request, its parameters sorted by name and their values percent-encoded,
/// which is SigV4's canonical query string. curl (7.88) signs a query as it is written, in that order, while the
/// store recomputes the signature from the sorted one: any other order is refused as SignatureDoesNotMatch. A
/// parameter without value is written "name=" (its canonical form).
std::string signedQuery(std::vector<std::pair<std::string, std::string>> parameters)
{
    std::sort(parameters.begin(), parameters.end());
    std::string q;
    for (const auto& [name, value] : parameters)
        q += (q.empty() ? "?" : "&") + name + "=" + encodeKey(value, false);
    return q;
}

/// what a URL's location leaves out and its requests send: the user info ("user:password") and the query
struct RequestParts
{
    std::string userinfo, query;
    bool operator==(const RequestParts& o) const { return userinfo == o.userinfo && query == o.query; }
};
std::mutex g_queriesMutex;
std::vector<RequestParts> g_requestParts; // by tag number (tagRequestParts)

/// @p url as it is sent: a tag (readerLocation's "#q=N") gives back the user info and the query it stands for; a
/// fragment is never sent
std::string withRememberedQuery(const std::string& url)
{
    const size_t hash = url.find('#');
    if (hash == std::string::npos) return url;
    std::string sent = url.substr(0, hash);
    if (url.compare(hash, 3, "#q=") == 0) {
        const size_t n = std::strtoul(url.c_str() + hash + 3, nullptr, 10);
        std::lock_guard<std::mutex> lock(g_queriesMutex);
        if (n < g_requestParts.size()) {
            const RequestParts& p = g_requestParts[n];
            if (!p.query.empty() && sent.find('?') == std::string::npos) sent += "?" + p.query;
            const size_t host = sent.find("://");
            // an '@' pasted unencoded in the password (the user info ends at the last one) is sent encoded
            std::string userinfo;
            for (const char c : p.userinfo)
                userinfo += c == '@' ? std::string("%40") : std::string(1, c);
            if (!userinfo.empty() && host != std::string::npos) sent.insert(host + 3, userinfo + "@");
        }
    }
    return sent;
}

} // namespace

std::string awsObjectUrl(const std::string& bucket, const std::string& region, const std::string& encodedKey)
{
    const auto lowerOrDigit = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
    bool label
        = bucket.size() >= 3 && bucket.size() <= 63 && lowerOrDigit(bucket.front()) && lowerOrDigit(bucket.back());
    for (const char c : bucket)
        label = label && (lowerOrDigit(c) || c == '-');
    return label ? "https://" + bucket + ".s3." + region + ".amazonaws.com/" + encodedKey
                 : "https://s3." + region + ".amazonaws.com/" + bucket + "/" + encodedKey;
}

namespace {

/// the request URL of an object (or of the bucket, for a listing)
std::string requestUrl(const RemoteUrl& u, const std::string& key)
{
    if (u.scheme == RemoteUrl::Http) return withRememberedQuery(u.http);
    const StoreConfig& c = storeConfig();
    if (u.scheme == RemoteUrl::Gs) return c.gsEndpoint + "/" + u.bucket + "/" + encodeKey(key);
    using Addressing = StoreConfig::Addressing;
    const std::string endpoint = c.endpoint.empty() ? "https://s3." + c.region + ".amazonaws.com" : c.endpoint;
    if (c.addressing == Addressing::Virtual) {
        // the bucket before the endpoint's host: http://localhost:9000 -> http://BUCKET.localhost:9000
        const size_t host = endpoint.find("://");
        return host == std::string::npos
            ? u.bucket + "." + endpoint + "/" + encodeKey(key)
            : endpoint.substr(0, host + 3) + u.bucket + "." + endpoint.substr(host + 3) + "/" + encodeKey(key);
    }
    if (c.addressing == Addressing::Path || !c.endpoint.empty())
        return endpoint + "/" + u.bucket + "/" + encodeKey(key);
    return awsObjectUrl(u.bucket, c.region, encodeKey(key));
}

// ---- one request ----------------------------------------------------------------------------------------------------

struct Response
{
    long status = 0;
    CURLcode curl = CURLE_OK;
    std::string curlError;
    std::string body; ///< listings and error bodies (bounded)
    uint64_t contentLength = 0;
    bool lengthGiven = false; ///< the answer had a Content-Length (a HEAD may leave it out)
    std::string contentType; ///< lower case, without parameters ("text/html")
    std::string etag;
    std::string lastModified; ///< as the server wrote it (an HTTP-date, in one of its three forms)
    std::string date; ///< the answer's Date: when the server answered
    std::string writerTag; ///< the object's kWriterTagHeader (a HEAD of an object this program wrote)
    long retryAfter = -1;
    std::string bucketRegion; ///< x-amz-bucket-region: S3 says where a bucket is (with a 301, or a wrong region)
    std::string location; ///< a redirect's Location
    std::string contentEncoding; ///< lower case; none is asked for, so any but "identity" is not the stored bytes
    /// Content-Range "bytes A-B/N": A and B (-1: none), and N (-1: none or '*'): what a 206 holds, and the object's
    /// size
    int64_t rangeFirst = -1, rangeLast = -1, rangeTotal = -1;
    uint64_t received = 0; ///< bytes written into the destination (ranged GETs)
};

struct Transfer
{
    CURL* easy = nullptr;
    RemoteUrl::Scheme scheme = RemoteUrl::Http;
    std::string bucket; ///< S3 and GCS
    std::string url; ///< as sent (after a bucket's redirect)
    curl_slist* headers = nullptr;
    Response response;
    uint8_t* destination = nullptr; ///< a ranged GET's bytes go here ...
    uint64_t capacity = 0; ///< ... up to this many
    char errorBuffer[CURL_ERROR_SIZE] = {};
    const std::atomic<bool>* giveUp = nullptr; ///< set: the transfer is given up once it is true
    /// set: told the bytes received so far each time the destination grows (a stream makes them readable)
    std::function<void(const Response&)> arrived;
    ~Transfer()
    {
        if (headers) curl_slist_free_all(headers);
        if (easy) curl_easy_cleanup(easy);
    }
};

size_t onBody(char* data, size_t size, size_t count, void* user)
{
    auto* t = static_cast<Transfer*>(user);
    const size_t n = size * count;
    const bool ok = t->response.status == 0 || t->response.status < 300;
    if (t->destination && ok) {
        if (t->response.received + n > t->capacity) return 0; // more than asked: the transfer fails, is not used
        std::memcpy(t->destination + t->response.received, data, n);
        t->response.received += n;
        g_bytes.fetch_add(n, std::memory_order_relaxed);
        if (t->arrived) t->arrived(t->response);
        return n;
    }
    if (t->response.body.size() < (size_t(16) << 20)) t->response.body.append(data, n);
    return n;
}

size_t onHeader(char* data, size_t size, size_t count, void* user)
{
    auto* t = static_cast<Transfer*>(user);
    const size_t n = size * count;
    std::string line(data, n);
    if (startsWith(line, "HTTP/")) {
        // a new response (after a redirect or 100-continue): what came before is not this one's
        t->response.etag.clear();
        t->response.writerTag.clear();
        t->response.retryAfter = -1;
        t->response.contentType.clear(); // a redirect's text/html made the object it leads to a "folder"
        t->response.contentLength = 0; // and its length, the object's size
        t->response.lengthGiven = false;
        t->response.bucketRegion.clear();
        t->response.location.clear();
        t->response.contentEncoding.clear();
        t->response.rangeFirst = t->response.rangeLast = t->response.rangeTotal = -1;
        const auto sp = line.find(' ');
        if (sp != std::string::npos) t->response.status = std::strtol(line.c_str() + sp + 1, nullptr, 10);
        return n;
    }
    const auto colon = line.find(':');
    if (colon == std::string::npos) return n;
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
        value.erase(value.begin());
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
        value.pop_back();
    if (name == "etag") t->response.etag = value;
    if (name == "last-modified") t->response.lastModified = value;
    if (name == "date") t->response.date = value;
    if (name == kWriterTagHeader || name == kGcsWriterTagHeader) t->response.writerTag = value;
    if (name == "content-length") {
        t->response.contentLength = std::strtoull(value.c_str(), nullptr, 10);
        t->response.lengthGiven = true;
    }
    if (name == "content-type") {
        std::string type = value.substr(0, value.find(';'));
        while (!type.empty() && type.back() == ' ')
            type.pop_back();
        std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return std::tolower(c); });
        t->response.contentType = type;
    }
    if (name == "retry-after") t->response.retryAfter = std::strtol(value.c_str(), nullptr, 10);
    if (name == "x-amz-bucket-region") t->response.bucketRegion = value;
    if (name == "location") t->response.location = value;
    if (name == "content-encoding") {
        t->response.contentEncoding = value;
        std::transform(value.begin(), value.end(), t->response.contentEncoding.begin(),
            [](unsigned char c) { return std::tolower(c); });
    }
    if (name == "content-range" && startsWith(value, "bytes ")) { // "bytes 100-199/1000", "bytes 0-9/*"
        char* end = nullptr;
        const long long first = std::strtoll(value.c_str() + 6, &end, 10);
        if (end != value.c_str() + 6 && *end == '-') {
            t->response.rangeFirst = first;
            char* lastEnd = nullptr;
            const long long last = std::strtoll(end + 1, &lastEnd, 10);
            if (lastEnd != end + 1 && *lastEnd == '/' && last >= first) t->response.rangeLast = last;
        }
        const size_t slash = value.find('/');
        if (slash != std::string::npos && slash + 1 < value.size() && value[slash + 1] != '*')
            t->response.rangeTotal = std::strtoll(value.c_str() + slash + 1, nullptr, 10);
    }
    return n;
}

/// DNS answers and TLS sessions, shared by every request of the process (a new connection resumes a TLS session
/// instead of a full handshake). Not connections: libcurl's shared connection cache is not safe across threads (its
/// known bug 11.11, curl#4915; with it a check of 1,024 remote objects crashed about one run in five); each thread
/// keeps its own (threadMulti). Never cleaned up: requests may run until the process exits.
CURLSH* sharedDnsAndTls()
{
    struct Share
    {
        CURLSH* handle = curl_share_init();
        std::mutex locks[CURL_LOCK_DATA_LAST];
    };
    static Share* const s = [] {
        storeConfig(); // curl_global_init first
        auto* s = new Share;
        if (!s->handle) return s;
        curl_share_setopt(s->handle, CURLSHOPT_USERDATA, s);
        curl_share_setopt(
            s->handle, CURLSHOPT_LOCKFUNC,
            +[](CURL*, curl_lock_data d, curl_lock_access, void* user) { static_cast<Share*>(user)->locks[d].lock(); });
        curl_share_setopt(
            s->handle, CURLSHOPT_UNLOCKFUNC,
            +[](CURL*, curl_lock_data d, void* user) { static_cast<Share*>(user)->locks[d].unlock(); });
        for (const curl_lock_data d : {CURL_LOCK_DATA_DNS, CURL_LOCK_DATA_SSL_SESSION})
            curl_share_setopt(s->handle, CURLSHOPT_SHARE, d);
        return s;
    }();
    return s->handle;
}

// ---- S3's redirects ------------------------------------------------------------------------------------------------

/// S3 answers a request for a bucket that another endpoint serves (a bucket new to its region, whose name does not
/// lead there yet in DNS; a bucket of another region asked at the global endpoint) with a redirect to the endpoint to
/// ask (307 TemporaryRedirect, 301 or 308 with a Location) and says the bucket's region (x-amz-bucket-region); boto3
/// asks there, signed for that region, and so do we. Kept per bucket for the process: the bucket's next requests go
/// there at once. Followed only within the same store (redirectAllowed), a few times per bucket at most.
struct BucketRedirect
{
    std::string from; ///< the origin (scheme://host[:port]) the bucket's requests are addressed to
    std::string to; ///< the origin they are sent to instead
    std::string region; ///< the region they are signed for (empty: the configured one)
    int hops = 0;
};
constexpr int kMaxRedirectHops = 3;
std::mutex g_redirectsMutex;
std::map<std::string, BucketRedirect> g_redirects; // by bucket

/// scheme://host[:port] of @p url ("" when it has no "://")
std::string originOf(const std::string& url)
{
    const size_t s = url.find("://");
    if (s == std::string::npos) return {};
    const size_t end = url.find_first_of("/?#", s + 3);
    return url.substr(0, end);
}

/// the host of an origin, lower case, without port ("[::1]" stays bracketed)
std::string hostOfOrigin(const std::string& origin)
{
    std::string host = origin.substr(origin.find("://") + 3);
    if (const size_t at = host.rfind('@'); at != std::string::npos) host.erase(0, at + 1);
    const size_t colon = host.rfind(':');
    if (colon != std::string::npos && host.find(']', colon) == std::string::npos) host.erase(colon);
    std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
    return host;
}

/// whether a request sent to @p from may follow a redirect to @p to: the same host (another port), or AWS's own
/// endpoints to each other; never from https to http. Elsewhere, the signed request (and its session token) would
/// go to a host the user never named
bool redirectAllowed(const std::string& from, const std::string& to)
{
    const bool fromHttps = startsWith(from, "https://"), toHttps = startsWith(to, "https://");
    if ((fromHttps && !toHttps) || (!toHttps && !startsWith(to, "http://"))) return false;
    const std::string a = hostOfOrigin(from), b = hostOfOrigin(to);
    const auto aws = [](const std::string& h) {
        for (const char* suffix : {".amazonaws.com", ".amazonaws.com.cn"}) {
            const size_t n = std::strlen(suffix);
            if (h.size() > n && h.compare(h.size() - n, n, suffix) == 0) return true;
        }
        return false;
    };
    return !b.empty() && (a == b || (aws(a) && aws(b)));
}

/// @p url and @p region as a request of @p bucket is sent and signed: to where the bucket was redirected
void applyRedirect(const std::string& bucket, std::string& url, std::string& region)
{
    std::lock_guard<std::mutex> lock(g_redirectsMutex);
    const auto it = g_redirects.find(bucket);
    if (it == g_redirects.end()) return;
    const BucketRedirect& r = it->second;
    if (url.compare(0, r.from.size(), r.from) == 0 && (url.size() == r.from.size() || url[r.from.size()] == '/'))
        url = r.to + url.substr(r.from.size());
    if (!r.region.empty()) region = r.region;
}

/// when @p t's answer is a redirect of an S3 request that may be followed (the same object, within the same store),
/// records it for the bucket and returns true: the request is to be sent again, where it now goes
bool followRedirect(const Transfer& t)
{
    const Response& r = t.response;
    if (t.scheme != RemoteUrl::S3 || r.curl != CURLE_OK || r.location.empty()
        || (r.status != 301 && r.status != 302 && r.status != 307 && r.status != 308))
        return false;
    const std::string from = originOf(t.url), to = originOf(r.location);
    const auto pathOf = [](const std::string& url, size_t origin) {
        return url.substr(origin, url.find_first_of("?#", origin) - origin);
    };
    // the same object at another place: a redirect elsewhere in the store is not this request's answer
    if (from.empty() || to.empty() || to == from || pathOf(t.url, from.size()) != pathOf(r.location, to.size())
        || !redirectAllowed(from, to))
        return false;
    std::lock_guard<std::mutex> lock(g_redirectsMutex);
    BucketRedirect& b = g_redirects[t.bucket];
    if (b.from.empty()) b.from = from; // sent before any redirect: where the bucket's requests are addressed
    if (from != b.from && from != b.to) return false; // sent elsewhere: not this bucket's addressing
    if (b.to != to) {
        if (b.hops >= kMaxRedirectHops) return false;
        b.to = to;
        ++b.hops;
    }
    if (!r.bucketRegion.empty()) b.region = r.bucketRegion;
    return true;
}

void prepare(Transfer& t, const RemoteUrl& u, const std::string& url, const std::vector<std::string>& extraHeaders,
    const std::string& payloadHash = kEmptySha256)
{
    const StoreConfig& c = storeConfig();
    t.easy = curl_easy_init();
    if (!t.easy) throw Error(ErrorKind::Io, url, "cannot start a request (curl_easy_init failed)");
    CURL* e = t.easy;
    t.scheme = u.scheme;
    t.bucket = u.bucket;
    t.url = url;
    std::string region = c.region;
    if (u.scheme == RemoteUrl::S3) applyRedirect(u.bucket, t.url, region);
    curl_easy_setopt(e, CURLOPT_URL, t.url.c_str());
    // an object key is literal: "x/../y.pt" and "./" are part of its name, as boto3 and S3 take them. libcurl would
    // remove such dot segments (RFC 3986) and send the request to another key than the one checked and reported: an
    // output named ".../x/../in/.metadata" replaced the input's .metadata
    if (u.scheme != RemoteUrl::Http) curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    if (CURLSH* share = sharedDnsAndTls()) curl_easy_setopt(e, CURLOPT_SHARE, share);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t.errorBuffer);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, onBody);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, onHeader);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 15L);
    // a ranged read that delivers less than 1 KiB a second over stallSeconds is given up (and retried): nothing at
    // all, or a trickle (a byte every half second kept a read going for ever under curl's floor of one byte). Other
    // requests keep that floor: S3 answers a long CompleteMultipartUpload with a space now and then to keep it open
    const bool rangedRead = std::any_of(
        extraHeaders.begin(), extraHeaders.end(), [](const std::string& h) { return startsWith(h, "Range: "); });
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, rangedRead ? 1024L : 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, c.stallSeconds);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, u.scheme == RemoteUrl::Http ? 1L : 0L); // HF resolve URLs redirect
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "optscope");
    // libcurl asks at least once a second whether to go on: not once the process abandons its requests, nor once
    // the work the calling thread does is cancelled (CancelScope), nor (a background fetch or an upload's part,
    // @c t.giveUp) once its object closes or its upload is dropped
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, &t);
    curl_easy_setopt(
        e, CURLOPT_XFERINFOFUNCTION, +[](void* transfer, curl_off_t, curl_off_t, curl_off_t, curl_off_t) -> int {
            const std::atomic<bool>* giveUp = static_cast<const Transfer*>(transfer)->giveUp;
            return g_abandoned.load() || (giveUp && giveUp->load()) || CancelScope::cancelled() ? 1 : 0;
        });
    if (!c.caFile.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, c.caFile.c_str());
    std::vector<std::string> headers = extraHeaders;
    if (u.scheme != RemoteUrl::Http && !c.accessKey.empty()) {
        const std::string sigv4 = "aws:amz:" + (u.scheme == RemoteUrl::Gs ? std::string("auto") : region) + ":s3";
        curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sigv4.c_str()); // curl copies option strings
        curl_easy_setopt(e, CURLOPT_USERNAME, c.accessKey.c_str());
        curl_easy_setopt(e, CURLOPT_PASSWORD, c.secretKey.c_str());
        headers.push_back("x-amz-content-sha256: " + payloadHash); // S3 wants it; curl signs with it
        if (!c.sessionToken.empty()) headers.push_back("x-amz-security-token: " + c.sessionToken);
    }
    for (const auto& h : headers)
        t.headers = curl_slist_append(t.headers, h.c_str());
    if (t.headers) curl_easy_setopt(e, CURLOPT_HTTPHEADER, t.headers);
}

bool retryable(const Response& r)
{
    switch (r.curl) {
    case CURLE_OK:
        return r.status == 500 || r.status == 502 || r.status == 503 || r.status == 504 || r.status == 429;
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_WRITE_ERROR: // more body than asked: a confused server or proxy; ask again
    // a malformed answer: on a kept connection, what an earlier answer's extra bytes left there ("Received HTTP/0.9
    // when not allowed"); curl drops that connection, and a new one answers
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_UNSUPPORTED_PROTOCOL:
        return true;
    default:
        return false;
    }
}

std::chrono::milliseconds backoff(int attempt, long retryAfter)
{
    if (retryAfter >= 0) return std::chrono::milliseconds(std::min(retryAfter, 30L) * 1000);
    return std::chrono::milliseconds(std::min(100L << attempt, 5000L));
}

/// an S3 XML answer as libxml2 reads it (no network, no entities fetched), freed with it: the one place the
/// answers (errors, listings, uploads) are parsed, each by its elements' names
class XmlAnswer
{
public:
    XmlAnswer(const std::string& body, const char* name, int options = 0)
        : m_doc(xmlReadMemory(body.data(), static_cast<int>(std::min<size_t>(body.size(), INT_MAX)), name, nullptr,
            XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | options))
    { }
    ~XmlAnswer() { xmlFreeDoc(m_doc); }
    XmlAnswer(const XmlAnswer&) = delete;
    XmlAnswer& operator=(const XmlAnswer&) = delete;
    explicit operator bool() const { return m_doc != nullptr; }
    /// calls @p f(element) for each element child of the root element
    template<typename F> void eachTopElement(F f) const
    {
        if (xmlNodePtr root = m_doc ? xmlDocGetRootElement(m_doc) : nullptr) eachElement(root, f);
    }
    template<typename F> static void eachElement(xmlNodePtr parent, F f)
    {
        for (xmlNodePtr n = parent->children; n; n = n->next)
            if (n->type == XML_ELEMENT_NODE) f(n);
    }
    static bool is(xmlNodePtr n, const char* name) { return xmlStrcmp(n->name, BAD_CAST name) == 0; }
    static std::string text(xmlNodePtr n)
    {
        xmlChar* t = xmlNodeGetContent(n);
        std::string s = t ? reinterpret_cast<const char*>(t) : "";
        xmlFree(t);
        return s;
    }
    /// the text of @p n's first child element named @p name, or ""
    static std::string child(xmlNodePtr n, const char* name)
    {
        for (xmlNodePtr c = n->children; c; c = c->next)
            if (c->type == XML_ELEMENT_NODE && is(c, name)) return text(c);
        return {};
    }

private:
    xmlDocPtr m_doc;
};

/// the text of the element @p name of an S3 XML error body ("Code": "NoSuchKey"; "Region"), or ""
std::string xmlErrorElement(const std::string& body, const char* name)
{
    if (body.find("<Error") == std::string::npos) return {};
    const XmlAnswer doc(body, "error.xml");
    std::string text;
    doc.eachTopElement([&](xmlNodePtr n) {
        if (XmlAnswer::is(n, name)) text = XmlAnswer::text(n);
    });
    return text;
}

/// the S3 error code of an XML error body ("NoSuchKey", "SignatureDoesNotMatch"), or ""
std::string xmlErrorCode(const std::string& body)
{
    return xmlErrorElement(body, "Code");
}

/// what S3's error codes for credentials the store refused mean, and what to do (AWS's documented codes; a
/// store's other 401 and 403 answers are "access denied")
struct CredentialHint
{
    const char* code;
    const char* what;
};
constexpr CredentialHint kCredentialHints[] = {
    {"InvalidAccessKeyId",
        "the store knows no such access key id: check that AWS_ACCESS_KEY_ID (or the profile's) is one of this "
        "store's"},
    {"SignatureDoesNotMatch",
        "the request's signature does not match: the secret key (AWS_SECRET_ACCESS_KEY, or the profile's) is not "
        "the one of the access key id"},
    {"InvalidToken",
        "the session token was refused: renew the temporary credentials (AWS_SESSION_TOKEN, or the profile's "
        "aws_session_token), or unset it for long-term keys"},
    {"ExpiredToken",
        "the session token has expired: renew the temporary credentials (AWS_SESSION_TOKEN, or the profile's "
        "aws_session_token)"},
    {"TokenRefreshRequired",
        "the session token has expired: renew the temporary credentials (AWS_SESSION_TOKEN, or the profile's "
        "aws_session_token)"},
    {"RequestTimeTooSkewed", "this machine's clock differs from the store's by more than 15 minutes: correct it"},
};

/// " at ENDPOINT (where it was given)" for a URL on a store other than AWS's or Google's own, whose name alone does
/// not say where the request went; shown as a location is (displayLocation: without user info)
std::string storeNamed(const std::string& shown)
{
    const StoreConfig& c = storeConfig();
    const bool s3 = startsWith(shown, "s3://") && !c.endpoint.empty();
    const bool gs = startsWith(shown, "gs://") && c.gsEndpoint != "https://storage.googleapis.com";
    if (!s3 && !gs) return {};
    return " at " + displayLocation(s3 ? c.endpoint : c.gsEndpoint) + " ("
        + (s3 ? c.endpointSource : std::string("STORAGE_EMULATOR_HOST")) + ")";
}

/// the failure of a request that will not be retried, as a message that names the URL and says what to do
[[noreturn]] void fail(const std::string& shown, const Response& r, const char* what)
{
    if (r.curl != CURLE_OK) {
        std::string detail = std::string(what) + ": " + curl_easy_strerror(r.curl);
        if (!r.curlError.empty()) detail += " (" + r.curlError + ")";
        if (r.curl == CURLE_PEER_FAILED_VERIFICATION || r.curl == CURLE_SSL_CONNECT_ERROR
            || r.curl == CURLE_SSL_CACERT_BADFILE)
            detail += "; the server's TLS certificate is not trusted: give its CA file in CURL_CA_BUNDLE";
        throw Error(ErrorKind::Io, shown, detail);
    }
    const std::string code = xmlErrorCode(r.body);
    std::string detail = std::string(what) + ": HTTP " + std::to_string(r.status) + (code.empty() ? "" : " " + code);
    const auto hint = std::find_if(std::begin(kCredentialHints), std::end(kCredentialHints),
        [&](const CredentialHint& h) { return code == h.code; });
    // a bucket in another region than the requests were signed for: S3 says which (400 AuthorizationHeaderMalformed
    // with <Region>, or 301 PermanentRedirect with x-amz-bucket-region)
    const std::string region = !r.bucketRegion.empty() ? r.bucketRegion : xmlErrorElement(r.body, "Region");
    if (r.status >= 300 && r.status < 400 && !r.location.empty())
        // followRedirect did not follow it: another host, a downgrade to http, another object, or too many
        detail += "; the server redirected the request to " + displayLocation(r.location)
            + ", which is not followed (only redirects to the same object within the same store are): give that "
              "endpoint in AWS_ENDPOINT_URL if it is the store's";
    else if (!region.empty() && region != storeConfig().region && startsWith(shown, "s3://"))
        detail += "; the bucket is in region " + region + ", the requests were signed for " + storeConfig().region
            + ": set AWS_REGION=" + region;
    else if (r.status >= 300 && r.status < 400)
        detail += "; the server redirected the request without saying where (no Location)";
    else if (hint != std::end(kCredentialHints))
        detail += std::string("; ") + hint->what;
    else if ((r.status == 403 || r.status == 401) && (startsWith(shown, "http://") || startsWith(shown, "https://")))
        detail += "; access denied by the server (a presigned URL may have expired: sign a new one)";
    else if (r.status == 403 || r.status == 401)
        detail += "; access denied: check the credentials (AWS_ACCESS_KEY_ID / AWS_PROFILE) and the bucket's policy";
    else if (r.status == 404 && code == "NoSuchBucket")
        detail += "; no such bucket" + storeNamed(shown);
    else if (r.status == 404)
        detail += "; no such object";
    else if (r.status == 412)
        throw Error(
            ErrorKind::Io, shown, "changed while being read (the object was replaced: its ETag, date or size changed)");
    throw Error(ErrorKind::Io, shown, detail);
}

/// this thread's multi handle, used by all its requests: its connection cache keeps the connections open from one
/// fetch to the next (a TCP connect per request otherwise); they close when the thread ends
CURLM* threadMulti()
{
    struct Multi
    {
        CURLM* handle = curl_multi_init();
        Multi()
        {
            if (handle) curl_multi_setopt(handle, CURLMOPT_MAXCONNECTS, long(2 * kParallel));
        }
        ~Multi()
        {
            if (handle) curl_multi_cleanup(handle);
        }
    };
    static thread_local Multi multi;
    if (!multi.handle) throw Error(ErrorKind::Io, {}, "cannot start requests (curl_multi_init failed)");
    return multi.handle;
}

/// runs @p transfers concurrently (at most kParallel at once), each to completion (status and curl code filled in)
void performAll(std::vector<Transfer*>& transfers)
{
    CURLM* multi = threadMulti();
    size_t next = 0;
    int running = 0;
    auto add = [&] {
        while (next < transfers.size() && running < kParallel) {
            curl_multi_add_handle(multi, transfers[next]->easy);
            g_requests.fetch_add(1, std::memory_order_relaxed);
            g_inFlight.fetch_add(1, std::memory_order_relaxed);
            ++next;
            ++running;
        }
    };
    add();
    int active = 1;
    while (active > 0 || next < transfers.size()) {
        curl_multi_perform(multi, &active);
        int queued = 0;
        while (CURLMsg* m = curl_multi_info_read(multi, &queued)) {
            if (m->msg != CURLMSG_DONE) continue;
            Transfer* t = nullptr;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &t);
            t->response.curl = m->data.result;
            t->response.curlError = t->errorBuffer;
            long status = 0;
            curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &status);
            if (status) t->response.status = status;
            curl_multi_remove_handle(multi, m->easy_handle);
            g_inFlight.fetch_sub(1, std::memory_order_relaxed);
            --running;
        }
        add();
        if (active > 0) curl_multi_poll(multi, nullptr, 0, 200, nullptr);
        if (active == 0 && running == 0 && next >= transfers.size()) break;
    }
}

/// The one retry rule of every request made here: runs the transfers @p make builds (indices below @p count), all in
/// flight at once; @p judge(i, response, mayRetry) returns true when transfer i is done, false to run it again (only
/// while mayRetry), or throws. Retries wait an exponential backoff, or the server's Retry-After, and are counted.
/// Work cancelled meanwhile (the calling thread's CancelScope) throws Error(Cancelled) within about a second.
void performRetrying(size_t count, const std::function<std::unique_ptr<Transfer>(size_t)>& make,
    const std::function<bool(size_t, Response&, bool)>& judge)
{
    std::vector<size_t> pending(count);
    for (size_t i = 0; i < count; ++i)
        pending[i] = i;
    const auto abandoned = [] {
        if (g_abandoned.load()) throw Error(ErrorKind::Io, {}, "given up: the application is closing");
        CancelScope::check({});
    };
    for (int attempt = 0; !pending.empty();) {
        abandoned();
        std::vector<std::unique_ptr<Transfer>> transfers;
        std::vector<Transfer*> raw;
        for (const size_t i : pending) {
            transfers.push_back(make(i));
            raw.push_back(transfers.back().get());
        }
        performAll(raw);
        abandoned(); // the transfers were cut short: what they got is not an answer
        const bool mayRetry = attempt + 1 < (g_failingStreak.load() ? 2 : kAttempts);
        std::vector<size_t> again, redirected;
        long retryAfter = -1;
        for (size_t k = 0; k < pending.size(); ++k) {
            Response& r = transfers[k]->response;
            if (followRedirect(*transfers[k])) { // sent again at once, where the bucket now goes; not a retry
                redirected.push_back(pending[k]);
                continue;
            }
            const bool answered = r.curl == CURLE_OK && r.status >= 200 && r.status < 300;
            if (judge(pending[k], r, mayRetry)) {
                if (answered) g_failingStreak.store(0, std::memory_order_relaxed);
                continue;
            }
            if (!mayRetry)
                throw Error(ErrorKind::Io, {}, "a request was neither done nor failed after its last attempt");
            again.push_back(pending[k]);
            retryAfter = std::max(retryAfter, r.retryAfter);
        }
        pending.swap(again);
        if (!pending.empty()) {
            ++attempt;
            g_retries.fetch_add(pending.size(), std::memory_order_relaxed);
            // a Retry-After may be 30 s: waited in steps, so that abandoning the requests or cancelling the work ends
            // the wait too
            const auto until = std::chrono::steady_clock::now() + backoff(attempt - 1, retryAfter);
            while (!g_abandoned.load() && !CancelScope::cancelled() && std::chrono::steady_clock::now() < until)
                std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
                    std::chrono::milliseconds(100), until - std::chrono::steady_clock::now()));
        }
        pending.insert(pending.end(), redirected.begin(), redirected.end());
    }
}

/// waits on @p changed until @p done() (under @p lock), in steps: work cancelled meanwhile (the calling thread's
/// CancelScope) throws Error(Cancelled) naming @p location instead of waiting for another thread stalled on a server
template<typename Done>
void waitCancellable(
    std::unique_lock<std::mutex>& lock, std::condition_variable& changed, const std::string& location, Done done)
{
    while (!done()) {
        CancelScope::check(location);
        changed.wait_for(lock, std::chrono::milliseconds(200));
    }
}

/// requests that must run even when the work they belong to was cancelled: they undo what it wrote
struct Uncancellable : CancelScope
{
    Uncancellable()
        : CancelScope(std::function<bool()> {})
    { }
};

/// requests that undo what unfinished work wrote (abort an upload, remove an object): not cut short by the cancel
/// that stopped the work, but given up after kUndoSeconds: a store that does not answer must not hold a Ctrl-C for
/// the retries' minutes. What could not be undone is said (remoteLeftBehind).
struct BoundedUndo : CancelScope
{
    static constexpr int kUndoSeconds = 20;
    BoundedUndo()
        : CancelScope([until = std::chrono::steady_clock::now() + std::chrono::seconds(kUndoSeconds)] {
            return std::chrono::steady_clock::now() > until;
        })
    { }
};

/// why an undo failed: its error, or that the server gave no answer within the undo's time
std::string undoFailure(const std::exception& e)
{
    const Error* error = dynamic_cast<const Error*>(&e);
    if (error && error->kind() == ErrorKind::Cancelled)
        return "no answer in " + std::to_string(BoundedUndo::kUndoSeconds) + " s";
    return e.what();
}

std::mutex g_leftBehindMutex;
std::vector<std::string> g_leftBehind;

void leftBehind(std::string what)
{
    std::lock_guard<std::mutex> lock(g_leftBehindMutex);
    g_leftBehind.push_back(std::move(what));
}

/// one request, retried while retryable; returns the last response
Response performOne(const RemoteUrl& u, const std::string& url, const std::vector<std::string>& headers, bool head,
    const std::string& shown, const char* what)
{
    Response last;
    performRetrying(
        1,
        [&](size_t) {
            auto t = std::make_unique<Transfer>();
            prepare(*t, u, url, headers);
            curl_easy_setopt(t->easy, CURLOPT_PRIVATE, t.get());
            if (head) curl_easy_setopt(t->easy, CURLOPT_NOBODY, 1L);
            return t;
        },
        [&](size_t, Response& r, bool mayRetry) {
            if (retryable(r) && mayRetry) return false;
            if (r.curl != CURLE_OK && r.curl != CURLE_WRITE_ERROR) fail(shown, r, what);
            last = std::move(r);
            return true;
        });
    return last;
}

// ---- what is where: object sizes and folder listings, cached for the process ----------------------------------------

struct ObjectInfo
{
    LocationKind kind = LocationKind::Missing;
    uint64_t size = 0;
    std::string etag;
    /// a HEAD's Last-Modified (listings give none; 0: none to trust): what pins an object without an ETag
    int64_t lastModified = 0;
    long httpStatus = 0; ///< plain HTTP: the HEAD's answer when it was no object
};

struct Listing
{
    std::map<std::string, ObjectInfo> entries; ///< key minus the listing's prefix -> what it is
    bool complete = false;
    std::string lastName; ///< the greatest name listed so far: names below it that are not listed do not exist
    std::string continuation;
};

std::mutex g_cacheMutex; // guards both caches; held during the requests that fill them
std::map<std::string, ObjectInfo> g_objects; // by URL
std::map<std::string, Listing> g_listings; // by scheme, bucket and prefix

std::string trimSlashes(std::string s)
{
    while (s.size() > 1 && s.back() == '/' && s.compare(s.size() - 3, 3, "://") != 0)
        s.pop_back();
    return s;
}

std::string quotedEtag(std::string etag)
{
    // If-Match wants the ETag quoted, as a HEAD gives it; listings may give it bare
    if (etag.size() < 2 || etag.front() != '"') etag = "\"" + etag + "\"";
    return etag;
}

/// an HTTP-date header as seconds since the epoch (curl parses its three forms: one server may send two of them);
/// 0 when absent or unreadable
int64_t httpDate(const std::string& value)
{
    if (value.empty()) return 0;
    const time_t t = curl_getdate(value.c_str(), nullptr);
    return t > 0 ? static_cast<int64_t>(t) : 0;
}

/// an answer's Last-Modified when it can tell versions apart: not one within a second of the answer's own Date (a
/// server that dates every answer now would make each read "changed")
int64_t trustedLastModified(const Response& r)
{
    const int64_t modified = httpDate(r.lastModified), now = httpDate(r.date);
    return modified && (!now || modified < now - 1) ? modified : 0;
}

/// whether an answer's ETag says it is another version of the object than the one pinned: a server that ignores
/// If-Match still labels its answer (compared without quotes and weakness, which servers spell differently)
bool otherVersion(const std::string& pinned, const std::string& answered)
{
    const auto bare = [](std::string e) {
        if (e.rfind("W/", 0) == 0) e.erase(0, 2);
        if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
        return e;
    };
    return !pinned.empty() && !answered.empty() && bare(pinned) != bare(answered);
}

/// one more page of the S3 listing of the keys under @p prefix (delimiter '/')
void listNextPage(const RemoteUrl& u, const std::string& prefix, Listing& l, const std::string& shown)
{
    std::string url = requestUrl(u, "");
    std::vector<std::pair<std::string, std::string>> query {{"list-type", "2"}, {"delimiter", "/"}, {"prefix", prefix}};
    if (!l.continuation.empty()) query.emplace_back("continuation-token", l.continuation);
    url += signedQuery(std::move(query));
    const Response r = performOne(u, url, {}, false, shown, "cannot list");
    if (r.status != 200) fail(shown, r, "cannot list");
    const ListingPage page = parseListingPage(r.body, prefix, shown);
    for (const auto& item : page.items) {
        ObjectInfo o;
        o.kind = item.folder ? LocationKind::Folder : LocationKind::File;
        o.size = item.size;
        o.etag = item.etag;
        l.entries[item.name] = o; // a folder and an object of one name: the folder is what a checkpoint is
        l.lastName = std::max(l.lastName, item.listedAs);
    }
    l.continuation = page.continuation;
    l.complete = !page.truncated || l.continuation.empty();
}

/// what is known of the keys under @p prefix (g_cacheMutex held)
Listing& cachedListing(const RemoteUrl& u, const std::string& prefix)
{
    return g_listings[std::to_string(u.scheme) + "\n" + u.bucket + "\n" + prefix];
}

/// the listing of the keys under @p prefix, paged far enough to answer for @p name (all of it when it is empty).
/// S3 lists in byte order, so a name below the last one listed that is not listed does not exist. g_cacheMutex held.
/// (a pointer: the listing lives in the cache, whatever temporaries the call was made with)
const Listing* listingFor(
    const RemoteUrl& u, const std::string& prefix, const std::string& name, const std::string& shown)
{
    Listing& l = cachedListing(u, prefix);
    while (!l.complete && (name.empty() || l.lastName.empty() || l.lastName < name))
        listNextPage(u, prefix, l, shown);
    return &l;
}

std::string folderPrefix(const std::string& key)
{
    return key.empty() || key.back() == '/' ? key : key + "/";
}

/// a GET of @p url's first byte, the transfer stopped there: what a HEAD would have said, from a server that refuses
/// HEAD (a presigned S3 URL is signed for GET alone: 403; some servers answer 405) or leaves its size out
Response probeFirstByte(const RemoteUrl& u, const std::string& url, const std::string& shown)
{
    uint8_t first = 0;
    Response last;
    performRetrying(
        1,
        [&](size_t) {
            auto t = std::make_unique<Transfer>();
            prepare(*t, u, url, {"Range: bytes=0-0"});
            curl_easy_setopt(t->easy, CURLOPT_PRIVATE, t.get());
            t->destination = &first; // a server that ignores Range: its second byte ends the transfer
            t->capacity = 1;
            return t;
        },
        [&](size_t, Response& r, bool mayRetry) {
            if (retryable(r) && mayRetry) return false;
            if (r.curl != CURLE_OK && r.curl != CURLE_WRITE_ERROR) fail(shown, r, "cannot read");
            last = std::move(r);
            return true;
        });
    return last;
}

ObjectInfo httpHead(const std::string& url)
{
    const RemoteUrl u = parseUrl(url);
    Response r = performOne(u, requestUrl(u, u.key), {}, true, displayLocation(url), "cannot read");
    const bool sizeless = r.status >= 200 && r.status < 300 && r.contentType != "text/html" && !r.lengthGiven;
    if (u.scheme == RemoteUrl::Http && (r.status == 403 || r.status == 405 || sizeless)) {
        const Response g = probeFirstByte(u, requestUrl(u, u.key), displayLocation(url));
        if (g.status == 206 && g.rangeTotal >= 0) {
            r = g;
            r.contentLength = static_cast<uint64_t>(g.rangeTotal);
            r.lengthGiven = true;
        } else if (g.status == 200 && g.lengthGiven) {
            r = g; // Range ignored: the whole object's length (reads will say the server serves no ranges)
        } else if (sizeless) {
            throw Error(ErrorKind::Io, displayLocation(url),
                "the server gives no size for it (no Content-Length, no Content-Range): cannot read in place");
        }
    }
    ObjectInfo o;
    if (r.status >= 200 && r.status < 300 && r.contentType == "text/html") {
        // a web server's page of a folder's entries (Python's http.server, Apache's autoindex): a folder, whose
        // files the formats look for by name. No checkpoint file is served as HTML.
        o.kind = LocationKind::Folder;
        o.httpStatus = r.status;
    } else if (r.status >= 200 && r.status < 300) {
        o.kind = LocationKind::File;
        o.size = r.contentLength;
        o.etag = r.etag;
        o.lastModified = trustedLastModified(r);
    } else if (r.status == 404 || r.status == 403 || (r.status >= 300 && r.status < 400)) {
        // plain HTTP cannot tell a folder from nothing: a folder is where a format looks for its files
        o.kind = LocationKind::Folder;
        o.httpStatus = r.status;
    } else {
        fail(displayLocation(url), r, "cannot read");
    }
    return o;
}

/// what @p url is (cached). On an object store a location inside a folder already looked at is answered from that
/// folder's listing; any other from one listing of the keys that start with its own key.
ObjectInfo objectInfo(const std::string& urlIn)
{
    const std::string url = trimSlashes(urlIn);
    const RemoteUrl u = parseUrl(url);
    const std::string shown = displayLocation(url);
    std::lock_guard<std::mutex> lock(g_cacheMutex);
    if (auto it = g_objects.find(url); it != g_objects.end()) return it->second;
    ObjectInfo o;
    if (u.scheme == RemoteUrl::Http) {
        o = httpHead(url);
    } else if (u.key.empty()) {
        o.kind = LocationKind::Folder; // a bucket
    } else {
        const auto slash = url.find_last_of('/');
        const std::string parentUrl = url.substr(0, slash), leaf = url.substr(slash + 1);
        auto parent = g_objects.find(parentUrl);
        if (parent != g_objects.end() && parent->second.kind == LocationKind::Folder) {
            const std::string parentKey = u.key.substr(0, u.key.size() - leaf.size());
            const Listing& l = *listingFor(u, parentKey, leaf + "/", shown);
            if (auto it = l.entries.find(leaf); it != l.entries.end()) o = it->second;
        } else {
            // a name without an extension is most likely a checkpoint's folder: the first page of its own listing
            // says so (any key under it) and is the page its files are then looked up in, one request fewer
            if (leaf.find('.') == std::string::npos) {
                Listing& inside = cachedListing(u, folderPrefix(u.key));
                if (inside.entries.empty() && !inside.complete) listNextPage(u, folderPrefix(u.key), inside, shown);
                if (!inside.entries.empty()) o.kind = LocationKind::Folder;
            }
            if (o.kind != LocationKind::Folder) {
                const Listing& l = *listingFor(u, u.key, "/", shown); // names "" (the object) and "/" (a folder)
                if (auto it = l.entries.find(""); it != l.entries.end()) o = it->second;
            }
        }
    }
    g_objects[url] = o;
    return o;
}

// ---- the remote ByteSource ------------------------------------------------------------------------------------------

class RemoteObject;

/// The bound on the fetched blocks the process holds, all objects together: remoteCacheBytes() (512 MiB unless
/// OPTSCOPE_REMOTE_CACHE_MB is set), above the read-ahead (256 MiB, at most half of it) and the look-ahead (128 MiB,
/// at most a quarter), which it must not evict before they are read. Blocks are given back as readers finish their
/// bytes; what stays is bytes a reader has not finished: a block shared by small items of tensors read later (a DCP
/// rank file written largest item first), a scan's read-ahead not reached. Beyond the bound the least lately used
/// blocks are evicted (a clock over each object, visiting the objects in turn) and fetched again if read again; a block
/// a reader points into (ByteSource::bytes) is never evicted.
class BlockCache
{
public:
    static BlockCache& instance()
    {
        static BlockCache* cache = new BlockCache; // never destroyed: a detached fetcher may outlive the statics
        return *cache;
    }
    static int64_t bound() { return int64_t(remoteCacheBytes()); }
    void add(const RemoteObject* o)
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_objects.insert(o);
    }
    void remove(const RemoteObject* o)
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_objects.erase(o);
    }
    /// evicts down to 7/8 of the bound when the process holds more. Call without an object's lock (lock order: the
    /// cache's, then an object's). One thread trims at a time; the others go on.
    void trimIfOver();

private:
    std::mutex m_mutex;
    std::set<const RemoteObject*> m_objects; ///< the open objects
    const RemoteObject* m_last = nullptr; ///< the object the last trim visited last: the next one starts after it
    std::atomic<int64_t> m_stuckAt {0}; ///< the least held since a trim found nothing more to evict; 0: none did
};

class RemoteObject final : public ByteSource, private FetchClient
{
public:
    RemoteObject(const std::string& url, const ObjectInfo& info)
        : m_remote(parseUrl(url))
        // a weak ETag (W/"…", nginx's for a compressed answer) never matches If-Match, which compares strongly: a
        // server that honours it would answer 412 to every read. Such an object is not pinned by If-Match, but every
        // answer's tag is still compared with it (answeredOtherVersion)
        , m_etag(startsWith(info.etag, "W/") ? std::string() : info.etag)
        , m_seenEtag(info.etag)
        , m_seenModified(info.lastModified)
    {
        m_path = displayLocation(url);
        m_size = info.size;
        m_fetchOnRead = true;
        if (m_seenEtag.empty() && !m_seenModified && m_size > 0) noteUnpinned(m_path);
        if (m_size > 0) {
            void* p
                = ::mmap(nullptr, m_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED)
                throw Error(ErrorKind::Io, m_path,
                    "cannot reserve " + std::to_string(m_size) + " bytes of address space: " + std::strerror(errno));
            m_base = static_cast<const uint8_t*>(p);
        }
        m_blocks = BlockMap(m_size, kBlock, kPart);
        ++g_openObjects;
        BlockCache::instance().add(this);
    }
    ~RemoteObject() override
    {
        BlockCache::instance().remove(this);
        {
            // the fetchers take no more work, and their transfers stop at once (a hung server must not hold an
            // exit for the retries' minutes)
            std::lock_guard<std::mutex> lock(m_mutex);
            m_closing = true;
            m_queue.clear();
        }
        FetcherPool::instance().forget(*this);
        if (m_streamer.joinable()) m_streamer.join(); // its transfer gave up at m_closing
        std::lock_guard<std::mutex> lastFetcherGone(m_mutex);
        --g_openObjects;
        for (uint64_t b = 0; b < m_blocks.blocks(); ++b)
            if (m_blocks.state(b) == BlockMap::Present) addHeld(-int64_t(bytesOf({b, b + 1})));
        if (m_heldWhole) g_heldWhole.fetch_sub(m_size);
        if (m_base) ::munmap(const_cast<uint8_t*>(m_base), m_size);
    }

    bool faulted() const override { return m_changed.load(); }
    void checkUnchanged() const override
    {
        if (m_changed.load())
            throw Error(ErrorKind::Io, m_path,
                "changed while being read (the object was replaced: its ETag, date or size changed)");
    }
    void adviseSequential(uint64_t offset, uint64_t length) const override
    {
        // the next 64 MiB of the range, fetched concurrently now
        if (offset < m_size) fetch(offset, std::min<uint64_t>({length, m_size - offset, uint64_t(64) << 20}));
    }
    void release(uint64_t, uint64_t) const override
    {
        // Kept: readers release ranges they may read again through a pointer they hold (a local map faults the pages
        // back in from the page cache; an anonymous map would read zeros). The memory goes with the object.
    }

    void copyOut(uint64_t offset, uint64_t length, uint8_t* destination, uint64_t scanEnd) const override
    {
        if (length == 0) return;
        std::unique_lock<std::mutex> lock(m_mutex);
        ensure(offset, length, lock);
        std::memcpy(destination, m_base + offset, length);
        // the range's bytes are done: nobody else points into them; the rest of their blocks is likely read soon
        const uint64_t end = offset + length;
        m_blocks.used(m_blocks.blocksOf(offset, length));
        giveBack(offset, length);
        // a sequential scan (a gather going through a rank file): the next range is fetched while this one is used
        const bool sequential
            = offset >= m_lastEnd && offset - m_lastEnd <= kSequentialGap; // a record's header between
        m_lastEnd = end;
        const uint64_t limit = std::min(scanEnd, m_size);
        if (sequential && end < limit) queueFetch(end, std::min(scanReadAhead(), limit - end), true);
        lock.unlock();
        BlockCache::instance().trimIfOver();
    }

    void finished(uint64_t offset, uint64_t length) const override
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        giveBack(offset, length);
    }

    void prefetch(uint64_t offset, uint64_t length) const override
    {
        if (offset >= m_size || length == 0) return;
        std::unique_lock<std::mutex> lock(m_mutex);
        queueFetch(offset, std::min(length, m_size - offset), false);
    }

    void stream(uint64_t offset, uint64_t length) const override
    {
        if (offset >= m_size || length == 0) return;
        if (std::min(length, m_size - offset) <= kPart) {
            fetch(offset, std::min(length, m_size - offset)); // one ranged GET anyway: here, with its retries
            return;
        }
        std::lock_guard<std::mutex> lock(m_mutex);
        if (m_closing || m_streamer.joinable()) return; // one stream per object: a second reads by ranges
        BlockMap::Claim claim = m_blocks.claim(m_blocks.blocksOf(offset, std::min(length, m_size - offset)), {});
        if (claim.runs.size() != 1) {
            // some of it is here already (or nothing is missing): the reads fetch the gaps by ranges
            settle(claim.runs, false);
            m_cv.notify_all();
            return;
        }
        m_streamer = std::thread([this, run = claim.runs.front()] { streamRun(run); });
    }

private:
    using Part = BlockMap::Part; ///< one ranged GET
    /// how far a sequential scan reads ahead: 64 MiB for one object, less when many are open, so that scans of all of
    /// them together (a check or gather going tensor by tensor through 1,024 rank files) keep at most 256 MiB ahead
    /// (64 MiB each fetched all 2.8 GB of a 1,024-rank checkpoint in its first seconds), never under 256 KiB
    /// (OPTSCOPE_REMOTE_READ_AHEAD_MB sets the 256 MiB; at most half of BlockCache::bound())
    static uint64_t scanReadAhead()
    {
        static const uint64_t total = [] {
            const std::string mb = env("OPTSCOPE_REMOTE_READ_AHEAD_MB");
            const uint64_t n = mb.empty() ? 0 : std::strtoull(mb.c_str(), nullptr, 10);
            // at most half the cache: a read-ahead evicted before it is read would be fetched twice
            return std::min<uint64_t>((n ? n : 256) << 20, uint64_t(BlockCache::bound()) / 2);
        }();
        constexpr uint64_t kMost = uint64_t(64) << 20, kLeast = uint64_t(256) << 10;
        return std::clamp(total / uint64_t(std::max(1, g_openObjects.load())), std::min(kLeast, total), kMost);
    }
    static constexpr uint64_t kSequentialGap = uint64_t(1) << 20;

    /// [offset, offset+length) is done (under the lock): the blocks all of whose bytes are done drop their memory
    void giveBack(uint64_t offset, uint64_t length) const
    {
        if (offset >= m_size || m_heldWhole) return; // fetched again only whole: kept until the object closes
        for (const BlockMap::Run& given : m_blocks.giveBack(offset, std::min(length, m_size - offset), thisReader())) {
            ::madvise(const_cast<uint8_t*>(m_base) + given.begin * kBlock, bytesOf(given), MADV_DONTNEED);
            addHeld(-int64_t(bytesOf(given)));
        }
    }
    /// the calling thread, as a BlockMap reader: a thread gives back its own pins, never another's
    static BlockMap::Reader thisReader()
    {
        static std::atomic<BlockMap::Reader> next {1};
        thread_local const BlockMap::Reader id = next++;
        return id;
    }
    uint64_t bytesOf(const BlockMap::Run& r) const { return std::min(r.end * kBlock, m_size) - r.begin * kBlock; }
    /// a claim's fetch ended (under the lock): its blocks are present, or absent again
    void settle(const std::vector<BlockMap::Run>& runs, bool fetched) const
    {
        m_blocks.settle(runs, fetched);
        if (fetched)
            for (const auto& r : runs)
                addHeld(int64_t(bytesOf(r)));
    }

    void fetch(uint64_t offset, uint64_t length) const override
    {
        if (length == 0) return;
        std::unique_lock<std::mutex> lock(m_mutex);
        ensure(offset, length, lock);
        // bytes() hands out a pointer: its block stays until the range is finished again (a second reader of an item
        // done before, while another thread finishes the rest of its block), and is never evicted
        m_blocks.reading(offset, length, thisReader());
        lock.unlock();
        BlockCache::instance().trimIfOver();
    }

public:
    /// the cache's clock on this object (BlockCache::trimIfOver): evicts at most @p want blocks, visiting at most 64,
    /// blocks not read yet only if @p unread. A read making its range present holds the lock from its last look to
    /// its copy: a block evicted before fetches again (BlockMap::claim)
    uint64_t evictSome(uint64_t want, uint64_t& cleared, bool unread) const
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        if (m_closing || m_heldWhole) return 0; // (held whole: a read of any of it would fetch it all again)
        uint64_t bytes = 0;
        for (const BlockMap::Run& r : m_blocks.evict(want, 64, cleared, unread)) {
            ::madvise(const_cast<uint8_t*>(m_base) + r.begin * kBlock, bytesOf(r), MADV_DONTNEED);
            bytes += bytesOf(r);
        }
        addHeld(-int64_t(bytes));
        return bytes;
    }

private:
    /// makes [offset, offset+length) present. The blocks it claims are fetched with the lock released, so that a
    /// read-ahead and a read proceed together; blocks another thread is fetching are waited for (and fetched here
    /// if that fetch failed).
    void ensure(uint64_t offset, uint64_t length, std::unique_lock<std::mutex>& lock) const
    {
        if (length == 0) return;
        if (offset > m_size || length > m_size - offset)
            throw Error(ErrorKind::Io, m_path,
                "a read of " + std::to_string(length) + " bytes at offset " + std::to_string(offset)
                    + " lies past the end of the object (" + std::to_string(m_size) + " bytes)");
        // blocks this call fetched: once given back by a reader that used them (copyOut), not fetched again here (once
        // evicted, they are)
        std::vector<BlockMap::Run> fetched;
        for (;;) {
            const bool whole = m_heldWhole;
            const BlockMap::Claim claim
                = m_blocks.claim(whole ? m_blocks.blocksOf(0, m_size) : m_blocks.blocksOf(offset, length), fetched);
            if (!claim.parts.empty()) {
                lock.unlock();
                std::exception_ptr failure;
                try {
                    if (whole)
                        fetchWhole(claim.runs);
                    else
                        fetchParts(claim.parts.data(), claim.parts.size());
                } catch (...) {
                    failure = std::current_exception();
                }
                lock.lock();
                settle(claim.runs, !failure);
                m_cv.notify_all();
                if (failure && !whole && m_rangesRefused.load()) {
                    holdWhole();
                    continue;
                }
                if (failure) std::rethrow_exception(failure);
                fetched.insert(fetched.end(), claim.runs.begin(), claim.runs.end());
                continue; // look again: another thread's fetch may have ended meanwhile
            }
            if (!claim.waiting) return; // all present
            // another thread's fetch (states change only under the lock: no wake-up is missed); a background fetch
            // stalled on its server is not waited out by cancelled work
            CancelScope::check(m_path);
            m_cv.wait_for(lock, std::chrono::milliseconds(200));
        }
    }

    struct Queued ///< a range for the background fetcher
    {
        uint64_t offset = 0, length = 0;
        bool scan = false; ///< a sequential scan's read-ahead: what the reader has passed meanwhile is not fetched
    };

    /// queues [offset, offset+length) for the background fetchers (under the lock): up to kFetchers of the
    /// process's FetcherPool serve the object while there is work, each taking about kBatch bytes of the queue at a
    /// time and fetching their absent blocks, many parts in flight. Their errors are left to the read that needs the
    /// bytes (it fetches them again and reports).
    void queueFetch(uint64_t offset, uint64_t length, bool scan) const
    {
        // asked now by a caller that will read them: wanted even if read before (a second pass); a scan's read-ahead
        // is a guess past the read (a caller may have read those bytes out of order already): it leaves them
        if (!scan) m_blocks.renew(m_blocks.blocksOf(offset, length));
        if (!m_queue.empty()) {
            Queued& last = m_queue.back(); // a scan asks again at every read: one range, extended
            if (last.scan == scan && offset >= last.offset && offset <= last.offset + last.length) {
                last.length = std::max(last.length, offset + length - last.offset);
                return;
            }
        }
        constexpr size_t kMaxQueued = 4096; // hints: beyond, the oldest are dropped (their reads fetch them)
        if (m_queue.size() >= kMaxQueued) m_queue.pop_front();
        m_queue.push_back({offset, length, scan});
        FetcherPool::instance().ask(*this, kFetchers);
    }

    void serveHints() const override
    {
        constexpr uint64_t kBatch = uint64_t(32) << 20;
        std::unique_lock<std::mutex> lock(m_mutex);
        while (!m_queue.empty() && !m_closing) {
            BlockMap::Claim batch;
            for (uint64_t taken = 0; !m_queue.empty() && taken < kBatch;) {
                Queued& q = m_queue.front();
                uint64_t start = q.offset;
                const uint64_t end = q.offset + q.length;
                if (q.scan && m_lastEnd != UINT64_MAX) start = std::max(start, std::min(m_lastEnd, end));
                const uint64_t n = std::min(end - start, kBatch - taken); // a long range is taken in batches
                if (n) {
                    BlockMap::Claim c = m_blocks.claim(m_blocks.blocksOf(start, n), {}, true);
                    batch.runs.insert(batch.runs.end(), c.runs.begin(), c.runs.end());
                    batch.parts.insert(batch.parts.end(), c.parts.begin(), c.parts.end());
                    taken += n;
                }
                if (start + n >= end) {
                    m_queue.pop_front();
                } else {
                    q.length = end - (start + n);
                    q.offset = start + n;
                }
            }
            if (batch.parts.empty()) continue;
            lock.unlock();
            bool fetched = true;
            try {
                fetchParts(batch.parts.data(), batch.parts.size(), true);
            } catch (...) {
                fetched = false;
            }
            lock.lock();
            settle(batch.runs, fetched);
            m_cv.notify_all();
            lock.unlock();
            BlockCache::instance().trimIfOver();
            lock.lock();
        }
        FetcherPool::instance().left(*this);
    }

    /// stream()'s thread: one GET of the claimed @p run. Every kStreamStep of bytes that arrives becomes present
    /// (a reader waiting in ensure() goes on); when the request ends short or fails, the whole blocks that arrived
    /// are kept and the rest goes back to absent and to the background fetchers, by ranges (their retries; a read
    /// reports their errors: a stream is not retried).
    void streamRun(BlockMap::Run run) const
    {
        constexpr uint64_t kStreamStep = uint64_t(1) << 20;
        const uint64_t from = run.begin * kBlock, to = std::min(run.end * kBlock, m_size);
        uint64_t settled = run.begin; // the run's blocks before this one are present
        const auto settleUpTo = [&](uint64_t block) {
            std::lock_guard<std::mutex> lock(m_mutex);
            settle({{settled, block}}, true);
            settled = block;
            m_cv.notify_all();
        };
        const bool whole = from == 0 && to == m_size;
        uint64_t arrivedAt = from; // the end of the bytes of this range received so far
        try {
            performRetrying(
                1,
                [&](size_t) {
                    std::vector<std::string> headers {
                        "Range: bytes=" + std::to_string(from) + "-" + std::to_string(to - 1)};
                    if (!m_etag.empty()) headers.push_back("If-Match: " + m_etag);
                    auto t = std::make_unique<Transfer>();
                    prepare(*t, m_remote, requestUrl(m_remote, m_remote.key), headers);
                    curl_easy_setopt(t->easy, CURLOPT_PRIVATE, t.get());
                    t->destination = const_cast<uint8_t*>(m_base) + from;
                    t->capacity = to - from;
                    t->giveUp = &m_closing;
                    // a long body in large reads: a sixteenth of the system calls and callbacks of curl's 16 KiB
                    curl_easy_setopt(t->easy, CURLOPT_BUFFERSIZE, 256L << 10);
                    t->arrived = [&](const Response& r) {
                        // the bytes of this range only: a 200 to a Range request would be the object's first bytes
                        if (r.status != 206 && !(r.status == 200 && whole)) return;
                        if (r.status == 206 && r.rangeFirst != static_cast<int64_t>(from)) return; // not what was asked
                        if (answeredOtherVersion(r)) return; // If-Match ignored: another version's bytes
                        const uint64_t at = arrivedAt = from + r.received;
                        const uint64_t block = at == to ? run.end : at / kBlock;
                        if (block == run.end ? block > settled : block >= settled + kStreamStep / kBlock)
                            settleUpTo(block);
                    };
                    return t;
                },
                [&](size_t, Response& r, bool) {
                    if (r.status == 412 || (r.status < 300 && answeredOtherVersion(r))) m_changed.store(true);
                    return true;
                });
        } catch (...) {
            // given up (the object closing, the process abandoning its requests): the reads say what happened
        }
        std::lock_guard<std::mutex> lock(m_mutex);
        // the whole blocks that arrived before the stream broke are the object's bytes (If-Match): kept
        if (const uint64_t received = arrivedAt / kBlock; received > settled && received < run.end) {
            settle({{settled, received}}, true);
            settled = received;
        }
        if (settled < run.end) {
            settle({{settled, run.end}}, false);
            if (!m_closing) {
                // the rest is asked for again, by the background fetchers' ranged GETs (with their retries) rather
                // than by the reader's small steps
                g_retries.fetch_add(1, std::memory_order_relaxed);
                queueFetch(settled * kBlock, to - settled * kBlock, false);
            }
        }
        m_cv.notify_all();
    }

    /// @p background: a fetcher's, given up when the object closes. A server may answer a range with less than asked,
    /// labelled so ("bytes A-B/N", B short of the end asked: RFC 9110 lets it; some cap each answer at a few MiB): the
    /// rest is asked for in turn, until every part is whole. The bytes go to their offsets in @p base (the object's
    /// memory unless given).
    void fetchParts(const Part* parts, size_t count, bool background = false, uint8_t* base = nullptr) const
    {
        std::vector<Part> rest;
        fetchPartsOnce(parts, count, background, rest, base);
        while (!rest.empty()) {
            std::vector<Part> asked;
            asked.swap(rest);
            fetchPartsOnce(asked.data(), asked.size(), background, rest, base);
        }
    }
    /// fetches @p parts; what a server answered in part (a truthful, shorter 206) is added to @p rest
    void fetchPartsOnce(
        const Part* parts, size_t count, bool background, std::vector<Part>& rest, uint8_t* base = nullptr) const
    {
        // a server that answered a Range request with the whole object does not serve ranges: said again at once
        // (each item of a check fetched the whole file again, about 90 times per command; found by a hunt), unless
        // the whole object is asked for
        if (m_rangesRefused.load() && !(count == 1 && parts[0].offset == 0 && parts[0].length == m_size))
            throw rangesRefusedError();
        if (!base) base = const_cast<uint8_t*>(m_base);
        const std::string url = requestUrl(m_remote, m_remote.key);
        performRetrying(
            count,
            [&](size_t i) {
                const auto& p = parts[i];
                std::vector<std::string> headers {
                    "Range: bytes=" + std::to_string(p.offset) + "-" + std::to_string(p.offset + p.length - 1)};
                if (!m_etag.empty()) headers.push_back("If-Match: " + m_etag);
                auto t = std::make_unique<Transfer>();
                prepare(*t, m_remote, url, headers);
                curl_easy_setopt(t->easy, CURLOPT_PRIVATE, t.get());
                t->destination = base + p.offset;
                t->capacity = p.length;
                if (background) t->giveUp = &m_closing;
                return t;
            },
            [&](size_t i, Response& r, bool mayRetry) {
                const auto& p = parts[i];
                const bool whole = p.offset == 0 && p.length == m_size;
                // a server that ignores If-Match still says which version it answered with
                if (r.curl == CURLE_OK && r.status < 300 && answeredOtherVersion(r)) {
                    m_changed.store(true);
                    checkUnchanged();
                }
                // a 206 holds the range its Content-Range says: another than the one asked for is not these bytes
                if (r.curl == CURLE_OK && r.status == 206 && r.rangeFirst != static_cast<int64_t>(p.offset))
                    throw Error(ErrorKind::Io, m_path,
                        "the server answered a request for bytes " + std::to_string(p.offset) + "-"
                            + std::to_string(p.offset + p.length - 1) + " with "
                            + (r.rangeFirst < 0 ? std::string("no Content-Range")
                                                : "bytes from " + std::to_string(r.rangeFirst))
                            + " (HTTP 206): cannot read in place; download the checkpoint, or serve it with a server "
                              "that answers Range as asked (nginx, S3, Hugging Face)");
                // bytes compressed on the way (no Accept-Encoding was sent): their length and offsets are not the
                // object's; no retry changes that (a short body "on every try" said nothing of why)
                if (r.curl == CURLE_OK && r.status >= 200 && r.status < 300 && !r.contentEncoding.empty()
                    && r.contentEncoding != "identity")
                    throw Error(ErrorKind::Io, m_path,
                        "the server sent the bytes content-encoded (Content-Encoding: " + r.contentEncoding
                            + ") though no encoding was asked for: cannot read in place; serve the files as they are "
                              "stored");
                if (r.curl == CURLE_OK && (r.status == 206 || (r.status == 200 && whole)) && r.received == p.length)
                    return true;
                // a shorter range than asked, whole as labelled: kept (the bytes are at their place), the rest asked
                if (r.curl == CURLE_OK && r.status == 206 && r.received > 0 && r.received < p.length
                    && r.rangeLast == static_cast<int64_t>(p.offset + r.received - 1)) {
                    rest.push_back({p.offset + r.received, p.length - r.received});
                    return true;
                }
                if (r.status == 412) {
                    m_changed.store(true);
                    checkUnchanged();
                }
                // (whether or not the body fitted: a whole object overflows the range's buffer and fails the transfer,
                // which must not be retried as a network fault, once per range)
                if (r.status == 200 && !whole) {
                    m_rangesRefused.store(true);
                    throw rangesRefusedError();
                }
                const bool shortBody = r.curl == CURLE_OK && (r.status == 206 || r.status == 200);
                if ((retryable(r) || shortBody) && mayRetry) return false;
                try {
                    if (shortBody)
                        throw Error(ErrorKind::Io, m_path,
                            "the server sent " + std::to_string(r.received) + " of the " + std::to_string(p.length)
                                + " bytes asked at offset " + std::to_string(p.offset) + ", on every try");
                    fail(m_path, r, "cannot read");
                } catch (const Error& e) {
                    if (r.curl != CURLE_ABORTED_BY_CALLBACK) noteReadFailure(e.what()); // (not a cancel)
                    throw;
                }
            });
    }

    /// the object's server answered a Range request with the whole object (the read that finds it holds the object
    /// whole instead: holdWhole)
    Error rangesRefusedError() const
    {
        return Error(ErrorKind::Io, m_path, "the server does not serve byte ranges (HTTP 200 to a Range request)");
    }
    /// what objects held whole may take together: half the block cache's bound (what eviction cannot free)
    static uint64_t wholeBudget() { return uint64_t(BlockCache::bound()) / 2; }

    /// (under the lock) the server serves no ranges: from now on the object is fetched whole with one GET and kept
    /// until it closes, if it fits what is left of wholeBudget(). Else throws, saying so, counted as a read failure
    /// once.
    void holdWhole() const
    {
        for (uint64_t held = g_heldWhole.load(); !m_heldWhole;) {
            if (m_size > wholeBudget() || held > wholeBudget() - m_size) {
                const Error e(ErrorKind::Io, m_path,
                    "the server does not serve byte ranges (HTTP 200 to a Range request), and the object ("
                        + std::to_string(m_size) + " bytes) is larger than what is read whole then ("
                        + std::to_string(wholeBudget() - std::min(wholeBudget(), held))
                        + " bytes left of half the remote cache, OPTSCOPE_REMOTE_CACHE_MB): cannot read in place; "
                          "download the checkpoint, or serve it with a server that answers Range (nginx, S3, Hugging "
                          "Face)");
                if (!m_refusalNoted.exchange(true)) noteReadFailure(e.what());
                throw e;
            }
            if (g_heldWhole.compare_exchange_weak(held, held + m_size)) m_heldWhole = true;
        }
    }
    /// one GET of the whole object; @p claimed are the blocks to fill (the others are present: a reader may point
    /// into them, so the answer goes to a scratch buffer first and only the claimed blocks are copied)
    void fetchWhole(const std::vector<BlockMap::Run>& claimed) const
    {
        const Part whole {0, m_size};
        if (claimed.size() == 1 && claimed.front().begin == 0 && claimed.front().end == m_blocks.blocks()) {
            fetchParts(&whole, 1);
            return;
        }
        std::vector<uint8_t> scratch(m_size);
        fetchParts(&whole, 1, false, scratch.data());
        for (const BlockMap::Run& r : claimed)
            std::memcpy(const_cast<uint8_t*>(m_base) + r.begin * kBlock, scratch.data() + r.begin * kBlock, bytesOf(r));
    }

    RemoteUrl m_remote;
    mutable std::atomic<bool> m_rangesRefused {false}; ///< a Range request was answered with the whole object
    mutable std::atomic<bool> m_refusalNoted {false}; ///< holdWhole's refusal counted as a read failure
    mutable bool m_heldWhole = false; ///< (under the lock) fetched whole, never evicted: holdWhole()
    std::string m_etag; ///< sent as If-Match (a strong ETag only)
    std::string m_seenEtag; ///< the ETag the object was opened with, weak or strong
    int64_t m_seenModified = 0; ///< its Last-Modified (ObjectInfo::lastModified)
    /// whether an answer is another version of the object than the one opened: its ETag (weak ones too: a server
    /// that labels a replaced file weakly still changes the label), else its Last-Modified, differs, or its
    /// Content-Range gives another size. A replaced file of the same size read without If-Match was a silent mix of
    /// two versions (weakly tagged, or tagged only by its date)
    bool answeredOtherVersion(const Response& r) const
    {
        if (r.rangeTotal >= 0 && static_cast<uint64_t>(r.rangeTotal) != m_size) return true;
        if (!m_seenEtag.empty() && !r.etag.empty()) return otherVersion(m_seenEtag, r.etag);
        const int64_t modified = httpDate(r.lastModified);
        return m_seenModified && modified && modified != m_seenModified;
    }
    mutable std::mutex m_mutex;
    mutable std::condition_variable m_cv; ///< a fetch finished: blocks changed state
    mutable BlockMap m_blocks {0, kBlock, kPart}; ///< which blocks are absent, being fetched, present
    mutable uint64_t m_lastEnd = UINT64_MAX; ///< where the last copyOut ended (a sequential scan continues there)
    static constexpr int kFetchers = 4; ///< background fetchers serving one object at a time, at most
    mutable std::deque<Queued> m_queue; ///< ranges for the background fetchers
    mutable std::atomic<bool> m_changed {false};
    std::atomic<bool> m_closing {false}; ///< being destroyed: background transfers abort
    mutable std::thread m_streamer; ///< stream()'s GET
};

void BlockCache::trimIfOver()
{
    const int64_t limit = bound();
    const int64_t held = g_held.load();
    if (held <= limit) return;
    // the last trim found nothing more to evict (readers point into the rest): tried again once a further 1/8 of the
    // bound is held above the least held since (a visit of every object per read would cost more than the reads)
    for (int64_t stuck = m_stuckAt.load(); held < stuck && !m_stuckAt.compare_exchange_weak(stuck, held);) { }
    if (held <= m_stuckAt.load() + limit / 8) return;
    std::unique_lock<std::mutex> lock(m_mutex, std::try_to_lock);
    if (!lock.owns_lock()) return; // another thread is trimming (or an object opening or closing: the next read trims)
    const int64_t target = limit - limit / 8;
    size_t idle = 0; // objects visited in a row that neither evicted nor took a mark
    // blocks read and not finished first (a small item's neighbours, read later or never); then read-aheads not
    // reached yet, which a read would fetch again soon
    for (bool unread : {false, true}) {
        for (idle = 0; g_held.load() > target && !m_objects.empty() && idle <= m_objects.size();) {
            auto it = m_objects.upper_bound(m_last);
            if (it == m_objects.end()) it = m_objects.begin();
            m_last = *it;
            // a few blocks from each object in turn: the clocks of all objects move together, close to one clock
            // as many as reach the target, so that the hand passes no more blocks than a clock's victims need
            const uint64_t need = uint64_t(std::max<int64_t>(g_held.load() - target, 0)) / kBlock + 1;
            uint64_t cleared = 0;
            const uint64_t evicted = (*it)->evictSome(std::min<uint64_t>(need, 16), cleared, unread);
            idle = evicted || cleared ? 0 : idle + 1;
        }
    }
    const int64_t left = g_held.load();
    m_stuckAt.store(left > target ? left : 0);
}

// ---- uploads --------------------------------------------------------------------------------------------------------

/// a request with a body from memory (PUT, POST), signed with the body's SHA-256
std::unique_ptr<Transfer> bodyRequest(const RemoteUrl& u, const std::string& url, const char* method,
    const uint8_t* body, uint64_t size, std::vector<std::string> headers = {})
{
    auto t = std::make_unique<Transfer>();
    const std::string hash = Sha256::hex(body, size);
    // no "Expect:" to turn curl's 100-continue off: curl 7.88 signs that removal as an empty "expect" header it then
    // does not send, and the store refuses every such PUT and POST as SignatureDoesNotMatch
    headers.push_back("Content-Type: application/octet-stream"); // not curl's form encoding, which servers parse
    prepare(*t, u, url, headers, hash);
    curl_easy_setopt(t->easy, CURLOPT_PRIVATE, t.get());
    curl_easy_setopt(t->easy, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(t->easy, CURLOPT_POSTFIELDS, size ? reinterpret_cast<const char*>(body) : "");
    curl_easy_setopt(t->easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(size));
    return t;
}

/// a body request's answer is a success: 2xx without an error in the body (S3 may answer a CompleteMultipartUpload
/// with 200 and an error in the body)
bool succeeded(const Response& r)
{
    return r.curl == CURLE_OK && r.status >= 200 && r.status < 300 && xmlErrorCode(r.body).empty();
}

/// runs body requests, retrying the ones that may be retried; throws naming @p shown for the first that fails
void performBodies(std::vector<std::function<std::unique_ptr<Transfer>()>>& make, std::vector<Response>& out,
    const std::string& shown, const char* what)
{
    out.assign(make.size(), {});
    performRetrying(
        make.size(), [&](size_t i) { return make[i](); },
        [&](size_t i, Response& r, bool mayRetry) {
            if (succeeded(r)) {
                out[i] = std::move(r);
                return true;
            }
            if ((retryable(r) || (r.curl == CURLE_OK && r.status == 200)) && mayRetry) return false;
            fail(shown, r, what);
        });
}

/// a DELETE that undoes what this run wrote (an object, an upload), retried while it may be; a 404 counts as done:
/// another process of the job undid it first. Throws naming @p shown as fail() does otherwise
void performUndo(const RemoteUrl& u, const std::string& url, const std::string& shown, const char* what)
{
    performRetrying(
        1, [&](size_t) { return bodyRequest(u, url, "DELETE", nullptr, 0); },
        [&](size_t, Response& r, bool mayRetry) {
            if (r.curl == CURLE_OK && ((r.status >= 200 && r.status < 300) || r.status == 404)) return true;
            if (retryable(r) && mayRetry) return false;
            fail(shown, r, what);
        });
}

/// the text of the root element's child @p element in the XML answer @p body ("UploadId"), or ""
std::string xmlText(const std::string& body, const char* element)
{
    const XmlAnswer doc(body, "answer.xml");
    std::string found;
    doc.eachTopElement([&](xmlNodePtr n) {
        if (found.empty() && XmlAnswer::is(n, element)) found = XmlAnswer::text(n);
    });
    return found;
}

} // namespace

void checkWritableUrl(const std::string& url)
{
    const RemoteUrl u = parseUrl(url);
    if (u.scheme == RemoteUrl::Http)
        throw Error(ErrorKind::Usage, displayLocation(url),
            "outputs cannot be written over plain HTTP: write to s3:// or gs://, or to a local path");
    if (u.key.empty()) throw Error(ErrorKind::Usage, displayLocation(url), "names a bucket, not an object to write");
    undoKilledRuns(); // what runs killed on this machine left there (output_journal.h), before this one looks
}

namespace {

constexpr uint64_t kSinglePut = uint64_t(16) << 20; ///< and the first 1,000 parts' size
constexpr uint64_t kMaxHeldPartBytes = uint64_t(128) << 20;
constexpr size_t kMaxParts = 10000; ///< S3's and GCS's limit

uint64_t partSizeOf(size_t number)
{
    return kSinglePut << std::min<size_t>(9, (number - 1) / 1000);
}

} // namespace

struct ObjectUpload::State
{
    std::string url; ///< as given (output_journal.h names the upload by it)
    RemoteUrl remote;
    std::string target; ///< the object's request URL
    std::string shown;
    std::vector<uint8_t> filling; ///< the part being filled
    size_t fillingNumber = 1;
    // the share being written (a job's upload; alone: one share of all parts): its last part number, and its parts'
    // size (0: 16 MiB doubling every 1,000 parts from its first)
    size_t shareFirst = 1;
    size_t shareLast = kMaxParts;
    uint64_t sharePartBytes = 0;
    bool joined = false; ///< another process's upload: that process completes or aborts it
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<std::pair<size_t, std::vector<uint8_t>>> waiting; ///< full parts not yet taken by the sender
    uint64_t heldBytes = 0; ///< of the parts waiting or being sent
    std::vector<std::string> etags; ///< per part number - 1, once sent (empty: a number no part has)
    std::string uploadId;
    std::exception_ptr failure; ///< the sender's, thrown to the writer
    bool finishing = false; ///< no more parts come
    bool completed = false;
    bool senderEnded = false; ///< sendParts returned
    std::atomic<bool> dropped {false}; ///< the upload will not complete: the sender's requests are given up
    std::string writerTag; ///< set: the object is created only where none is, and carries this tag
    std::thread sender;
};

ObjectUpload::ObjectUpload(const std::string& url)
    : m(std::make_unique<State>())
{
    m->url = url;
    checkWritableUrl(url);
    m->remote = parseUrl(url);
    m->target = requestUrl(m->remote, m->remote.key);
    m->shown = displayLocation(url);
}

ObjectUpload::ObjectUpload(const std::string& url, const std::string& uploadId)
    : ObjectUpload(url)
{
    m->uploadId = uploadId;
    m->joined = true;
}

void ObjectUpload::createOnlyNew(const std::string& writerTag)
{
    m->writerTag = writerTag;
}

namespace {

/// the header that makes a write create its object only where none is, in the store's own spelling
std::string createOnlyHeader(const RemoteUrl& u)
{
    return u.scheme == RemoteUrl::Gs ? "x-goog-if-generation-match: 0" : "If-None-Match: *";
}

/// the metadata header that tags an object with the run that wrote it
std::string writerTagHeader(const RemoteUrl& u, const std::string& tag)
{
    return std::string(u.scheme == RemoteUrl::Gs ? kGcsWriterTagHeader : kWriterTagHeader) + ": " + tag;
}

/// the writer tag of the object at @p target ("" when it has none or is not there)
std::string writerTagOf(const RemoteUrl& u, const std::string& target, const std::string& shown)
{
    const Response r = performOne(u, target, {}, true, shown, "cannot read");
    return r.status == 200 ? r.writerTag : std::string();
}

/// the store answered a create-only-if-new with 501 NotImplemented (an S3-compatible store without conditional
/// writes): this process creates its objects without the condition from then on
std::atomic<bool> g_storeRefusesConditions {false};

/// runs the request that creates the object (its PUT, or the upload's completion), made by @p make(conditional).
/// Created only where none is (with a writer tag): a 412 means an object is there, ours when it carries our tag (an
/// earlier try went through and its answer was lost), else another writer's, which is said and kept. A store that
/// does not implement the condition (501) is asked again without it: the prefix was found empty when the run
/// started, only a second writer at the same time goes unnoticed there
void performCreate(const RemoteUrl& u, const std::string& target, const std::string& shown,
    const std::string& writerTag, const std::function<std::unique_ptr<Transfer>(bool)>& make, const char* what)
{
    bool there = false;
    bool conditional = false; // the request in flight asked for the condition
    performRetrying(
        1,
        [&](size_t) {
            conditional = !writerTag.empty() && !g_storeRefusesConditions.load();
            return make(conditional);
        },
        [&](size_t, Response& r, bool mayRetry) {
            if (succeeded(r)) return true;
            if (r.curl == CURLE_OK && r.status == 412 && conditional) {
                there = true;
                return true;
            }
            if (r.curl == CURLE_OK && r.status == 501 && conditional && mayRetry) {
                g_storeRefusesConditions.store(true);
                return false;
            }
            // 409 ConditionalRequestConflict: another conditional write of the key is in flight; asked again
            const bool conflict = r.curl == CURLE_OK && r.status == 409 && conditional;
            if ((retryable(r) || conflict || (r.curl == CURLE_OK && r.status == 200)) && mayRetry) return false;
            fail(shown, r, what);
        });
    if (there && writerTagOf(u, target, shown) != writerTag)
        throw Error(ErrorKind::Io, shown,
            "another writer created this object while this run wrote it (HTTP 412: it was to be created only where "
            "none is): two runs write to one output; what the other wrote is kept");
}

} // namespace

ObjectUpload::~ObjectUpload()
{
    if (m->sender.joinable()) {
        m->dropped.store(true); // not completed: its parts in flight are of no use
        {
            std::lock_guard<std::mutex> lock(m->mutex);
            m->finishing = true;
            m->waiting.clear();
        }
        m->changed.notify_all();
        m->sender.join();
    }
    if (m->completed || m->uploadId.empty() || m->joined) return;
    // an upload that does not complete leaves nothing: its parts are dropped (also when cancelled: that is why)
    try {
        const BoundedUndo undo;
        performUndo(
            m->remote, m->target + signedQuery({{"uploadId", m->uploadId}}), m->shown, "cannot abort the upload");
        journalSettled(m->url, m->uploadId);
    } catch (const std::exception& e) {
        leftBehind(
            m->shown + ": an incomplete multipart upload (upload id " + m->uploadId + "; " + undoFailure(e) + ")");
    }
}

void ObjectUpload::write(const void* data, size_t size)
{
    const auto* p = static_cast<const uint8_t*>(data);
    while (size > 0) {
        const uint64_t partSize
            = m->sharePartBytes ? m->sharePartBytes : partSizeOf(m->fillingNumber - m->shareFirst + 1);
        // a full part is sent once a byte follows it: an object of exactly one part stays a single PUT
        if (m->filling.size() == partSize) sendFilledPart();
        if (m->filling.capacity() < partSize) m->filling.reserve(partSize);
        const size_t take = static_cast<size_t>(std::min<uint64_t>(size, partSize - m->filling.size()));
        m->filling.insert(m->filling.end(), p, p + take);
        p += take;
        size -= take;
    }
}

void ObjectUpload::sendFilledPart()
{
    if (m->fillingNumber > m->shareLast)
        throw Error(ErrorKind::Io, m->shown,
            m->shareLast == kMaxParts ? "cannot write: larger than the 10,000 parts of an upload hold"
                                      : "cannot write: this process's share of the upload is longer than planned");
    std::unique_lock<std::mutex> lock(m->mutex);
    const uint64_t bytes = m->filling.size();
    waitCancellable(lock, m->changed, m->shown,
        [&] { return m->failure || m->heldBytes == 0 || m->heldBytes + bytes <= kMaxHeldPartBytes; });
    if (m->failure) std::rethrow_exception(m->failure);
    m->waiting.emplace_back(m->fillingNumber, std::move(m->filling));
    m->heldBytes += bytes;
    m->filling = {};
    ++m->fillingNumber;
    if (!m->sender.joinable()) m->sender = std::thread([this] { sendParts(); });
    lock.unlock();
    m->changed.notify_all();
}

/// the sender thread: starts the multipart upload, then sends what waits, all of it at once (curl's multi
/// interface), until complete() says no more parts come
void ObjectUpload::sendParts()
{
    try {
        std::vector<Response> done;
        std::string uploadId;
        {
            std::lock_guard<std::mutex> lock(m->mutex);
            uploadId = m->uploadId; // a shared upload is started (or joined) before its first part
        }
        if (uploadId.empty()) uploadId = startShared();
        for (;;) {
            std::vector<std::pair<size_t, std::vector<uint8_t>>> batch;
            {
                std::unique_lock<std::mutex> lock(m->mutex);
                m->changed.wait(lock, [&] { return !m->waiting.empty() || m->finishing; });
                if (m->waiting.empty()) {
                    m->senderEnded = true;
                    m->changed.notify_all();
                    return;
                }
                batch.swap(m->waiting);
            }
            std::vector<std::function<std::unique_ptr<Transfer>()>> parts;
            for (const auto& [number, bytes] : batch)
                parts.push_back([&, number = number, data = bytes.data(), size = bytes.size()] {
                    auto t = bodyRequest(m->remote,
                        m->target + signedQuery({{"partNumber", std::to_string(number)}, {"uploadId", uploadId}}),
                        "PUT", data, size);
                    t->giveUp = &m->dropped;
                    return t;
                });
            performBodies(parts, done, m->shown, "cannot write");
            std::lock_guard<std::mutex> lock(m->mutex);
            for (size_t i = 0; i < batch.size(); ++i) {
                if (m->etags.size() < batch[i].first) m->etags.resize(batch[i].first);
                m->etags[batch[i].first - 1] = done[i].etag;
                m->heldBytes -= batch[i].second.size();
            }
            m->changed.notify_all();
        }
    } catch (...) {
        std::lock_guard<std::mutex> lock(m->mutex);
        m->failure = std::current_exception();
        m->waiting.clear();
        m->heldBytes = 0;
        m->senderEnded = true;
        m->changed.notify_all();
    }
}

std::string ObjectUpload::startShared()
{
    std::vector<Response> done;
    std::vector<std::string> headers;
    if (!m->writerTag.empty()) headers.push_back(writerTagHeader(m->remote, m->writerTag));
    std::vector<std::function<std::unique_ptr<Transfer>()>> start {[&] {
        auto t = bodyRequest(m->remote, m->target + signedQuery({{"uploads", ""}}), "POST", nullptr, 0, headers);
        t->giveUp = &m->dropped;
        return t;
    }};
    performBodies(start, done, m->shown, "cannot start the upload");
    const std::string uploadId = xmlText(done[0].body, "UploadId");
    if (uploadId.empty()) throw Error(ErrorKind::Io, m->shown, "cannot start the upload: the server gave no UploadId");
    {
        std::lock_guard<std::mutex> lock(m->mutex);
        m->uploadId = uploadId;
    }
    journalOutput(JournalledOutput::Upload, m->url, uploadId); // a killed run's, undone later
    pausePoint("uploading"); // tests: a process killed with its upload open
    return uploadId;
}

void ObjectUpload::beginShare(size_t index, size_t count, uint64_t bytes)
{
    const size_t block = count ? kMaxParts / count : 0;
    if (block == 0 || index >= count)
        throw Error(ErrorKind::Usage, m->shown,
            "cannot write share " + std::to_string(index) + " of " + std::to_string(count)
                + " of an upload: an upload holds at most 10,000 parts");
    if (!m->filling.empty()) sendFilledPart(); // the previous share's last part
    m->shareFirst = 1 + index * block;
    m->shareLast = index + 1 == count ? kMaxParts : m->shareFirst + block - 1;
    // k parts of about bytes / k, not parts of a fixed size and a short rest: every part but the object's last must
    // be 5 MiB (a 20 MiB share in 16 MiB parts left a 4 MiB one that S3 refuses). With k = bytes / base rounded up,
    // each part is over base / 2 = 8 MiB, or the whole share, which the caller makes at least kMinPartBytes
    m->sharePartBytes = 0;
    if (bytes) {
        const uint64_t base = std::max<uint64_t>(kSinglePut, (bytes + block - 1) / block);
        const uint64_t parts = (bytes + base - 1) / base;
        m->sharePartBytes = (bytes + parts - 1) / parts;
    }
    m->fillingNumber = m->shareFirst;
}

void ObjectUpload::sendLastParts()
{
    if (!m->filling.empty()) sendFilledPart();
    if (!m->sender.joinable()) return;
    {
        std::unique_lock<std::mutex> lock(m->mutex);
        m->finishing = true;
        m->changed.notify_all();
        // the last parts' requests: cancelled work does not wait for them (the destructor drops the upload)
        waitCancellable(lock, m->changed, m->shown, [&] { return m->senderEnded; });
    }
    m->sender.join();
    if (m->failure) std::rethrow_exception(m->failure);
}

std::string ObjectUpload::finishShare()
{
    sendLastParts();
    std::string parts;
    for (size_t i = 0; i < m->etags.size(); ++i)
        if (!m->etags[i].empty()) parts += std::to_string(i + 1) + " " + m->etags[i] + "\n";
    return parts;
}

void ObjectUpload::addParts(const std::string& parts)
{
    // the sender thread records this process's own parts in etags meanwhile (ThreadSanitizer found the two resizing
    // the vector at once in a 2-process gather to s3://)
    std::lock_guard<std::mutex> lock(m->mutex);
    size_t at = 0;
    while (at < parts.size()) {
        const size_t space = parts.find(' ', at), nl = parts.find('\n', at);
        size_t number = 0;
        if (space < nl && nl != std::string::npos) number = std::strtoull(parts.c_str() + at, nullptr, 10);
        if (number < 1 || number > kMaxParts)
            throw Error(
                ErrorKind::Format, m->shown, "a process of the job reported a part of the upload it cannot have");
        if (m->etags.size() < number) m->etags.resize(number);
        m->etags[number - 1] = parts.substr(space + 1, nl - space - 1);
        at = nl + 1;
    }
}

void ObjectUpload::complete()
{
    if (!m->sender.joinable() && m->uploadId.empty()) {
        // 16 MiB or less: one PUT
        performCreate(
            m->remote, m->target, m->shown, m->writerTag,
            [&](bool conditional) {
                std::vector<std::string> headers;
                if (!m->writerTag.empty()) headers.push_back(writerTagHeader(m->remote, m->writerTag));
                if (conditional) headers.push_back(createOnlyHeader(m->remote));
                return bodyRequest(m->remote, m->target, "PUT", m->filling.data(), m->filling.size(), headers);
            },
            "cannot write");
    } else {
        sendLastParts();
        std::string body = "<CompleteMultipartUpload>";
        for (size_t i = 0; i < m->etags.size(); ++i)
            if (!m->etags[i].empty())
                body += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + m->etags[i]
                    + "</ETag></Part>";
        body += "</CompleteMultipartUpload>";
        const std::string query = signedQuery({{"uploadId", m->uploadId}});
        // not cut short by a cancel: the object would be there all the same, while the run reports it is not
        const Uncancellable completing;
        performCreate(
            m->remote, m->target, m->shown, m->writerTag,
            [&](bool conditional) {
                return bodyRequest(m->remote, m->target + query, "POST", reinterpret_cast<const uint8_t*>(body.data()),
                    body.size(),
                    conditional ? std::vector<std::string> {createOnlyHeader(m->remote)} : std::vector<std::string>());
            },
            "cannot complete the upload");
    }
    m->completed = true;
    if (!m->uploadId.empty() && !m->joined) journalSettled(m->url, m->uploadId);
    pausePoint("uploaded"); // tests: a process killed after an object of its output is stored
    forgetRemoteListings(); // what was known of that location is no longer true
}

void removeObject(const std::string& url, const std::string& writerTag)
{
    try {
        const BoundedUndo undo; // removing what cancelled work wrote
        const RemoteUrl u = parseUrl(url);
        // another writer's object (another run's, written to the same output meanwhile) is not ours to remove
        if (!writerTag.empty() && writerTagOf(u, requestUrl(u, u.key), displayLocation(url)) != writerTag) return;
        performUndo(u, requestUrl(u, u.key), displayLocation(url), "cannot remove");
    } catch (const std::exception& e) {
        leftBehind(displayLocation(url) + ": written, and not removed (" + undoFailure(e) + ")");
    }
}

void abortUploadsUnder(const std::string& url)
{
    try {
        const BoundedUndo undo;
        const RemoteUrl u = parseUrl(url);
        if (u.scheme == RemoteUrl::Http || u.key.empty()) return;
        const bool underFolder = u.key.back() == '/'; // else the one object's uploads only
        std::string keyMarker, idMarker;
        for (int page = 0; page < 1000; ++page) {
            std::vector<std::pair<std::string, std::string>> query {{"prefix", u.key}, {"uploads", ""}};
            if (!keyMarker.empty()) {
                query.emplace_back("key-marker", keyMarker);
                query.emplace_back("upload-id-marker", idMarker);
            }
            const std::string list = requestUrl(u, "") + signedQuery(std::move(query));
            const Response r = performOne(u, list, {}, false, displayLocation(url), "cannot list uploads");
            if (r.status != 200) {
                leftBehind(displayLocation(url) + ": its incomplete multipart uploads could not be listed (HTTP "
                    + std::to_string(r.status) + ")");
                return;
            }
            const UploadsPage uploads = parseUploadsPage(r.body, u.key, displayLocation(url));
            for (const UploadsPage::Upload& upload : uploads.uploads) {
                if (!underFolder && upload.key != u.key) continue;
                const std::string shown = displayLocation(url) + upload.key.substr(u.key.size());
                try {
                    // 404 (NoSuchUpload): another process of the job aborted it first
                    performUndo(u, requestUrl(u, upload.key) + signedQuery({{"uploadId", upload.id}}), shown,
                        "cannot abort the upload");
                } catch (const std::exception& e) {
                    leftBehind(shown + ": an incomplete multipart upload (upload id " + upload.id + "; "
                        + undoFailure(e) + ")");
                }
            }
            if (!uploads.truncated || uploads.nextKeyMarker.empty()) return;
            keyMarker = uploads.nextKeyMarker;
            idMarker = uploads.nextUploadIdMarker;
        }
    } catch (const std::exception& e) {
        leftBehind(
            displayLocation(url) + ": its incomplete multipart uploads were not aborted (" + undoFailure(e) + ")");
    }
}

std::string storeOf(const std::string& url)
{
    const RemoteUrl u = parseUrl(url);
    return requestUrl(u, "");
}

bool abortUpload(const std::string& url, const std::string& uploadId)
{
    try {
        const BoundedUndo undo;
        const RemoteUrl u = parseUrl(url);
        performUndo(u, requestUrl(u, u.key) + signedQuery({{"uploadId", uploadId}}), displayLocation(url),
            "cannot abort the upload");
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

bool removeTaggedObjectsUnder(const std::string& prefix, const std::string& writerTag)
{
    try {
        const BoundedUndo undo;
        forgetRemoteListings();
        for (const auto& name : folderEntries(prefix)) {
            const std::string url = childLocation(prefix, name);
            const RemoteUrl u = parseUrl(url);
            // another writer's object (another run's, written to the same output meanwhile) is not ours to remove
            if (writerTagOf(u, requestUrl(u, u.key), displayLocation(url)) == writerTag)
                performUndo(u, requestUrl(u, u.key), displayLocation(url), "cannot remove");
        }
        forgetRemoteListings();
        return true;
    } catch (const std::exception&) {
        forgetRemoteListings();
        return false;
    }
}

std::shared_ptr<const ByteSource> openRemoteObject(const std::string& url)
{
    ObjectInfo info = objectInfo(url);
    // plain HTTP cannot tell a folder from nothing (httpHead): its answer, not a guess, is what is said
    if (info.kind == LocationKind::Folder && info.httpStatus && info.httpStatus != 200)
        throw Error(ErrorKind::Io, displayLocation(url),
            info.httpStatus == 404 ? "no such object (HTTP 404)"
                                   : "cannot read: HTTP " + std::to_string(info.httpStatus) + ", no object to read");
    if (info.kind == LocationKind::Folder)
        throw Error(ErrorKind::Io, displayLocation(url), "is a folder (a prefix), expected an object");
    if (info.kind != LocationKind::File) throw Error(ErrorKind::Io, displayLocation(url), "no such object");
    return std::make_shared<RemoteObject>(url, info);
}

void remoteStatAhead(const std::vector<std::string>& urlsIn)
{
    std::vector<std::string> todo; // plain HTTP, not known yet (an object store answers from its listings)
    {
        std::lock_guard<std::mutex> lock(g_cacheMutex);
        for (const auto& u : urlsIn) {
            std::string url = trimSlashes(u);
            if (parseUrl(url).scheme == RemoteUrl::Http && !g_objects.count(url)) todo.push_back(std::move(url));
        }
    }
    std::sort(todo.begin(), todo.end());
    todo.erase(std::unique(todo.begin(), todo.end()), todo.end());
    if (todo.size() < 2) return;
    constexpr size_t kThreads
        = 64; // HEADs in flight, as many as the fetcher pool (each thread's transfers share the process's connections)
    // (each under the caller's cancel scope: its cancel ends these HEADs too)
    forEachOnThreads(todo.size(), static_cast<unsigned>(std::min(kThreads, todo.size())), [&](size_t i) {
        ObjectInfo o;
        try {
            o = httpHead(todo[i]);
        } catch (...) {
            return; // statLocation asks again, and reports
        }
        std::lock_guard<std::mutex> lock(g_cacheMutex);
        g_objects.emplace(todo[i], o);
    });
}

LocationStat remoteStat(const std::string& url)
{
    const ObjectInfo o = objectInfo(url);
    return {o.kind, o.size, 0, o.httpStatus ? "HTTP " + std::to_string(o.httpStatus) : std::string(), o.etag};
}

std::vector<std::string> remoteFolderEntries(const std::string& url)
{
    if (!remoteCanList(url))
        throw Error(ErrorKind::Io, displayLocation(url),
            "cannot list a folder over HTTP: name the file (for example .../model.safetensors) or use s3://");
    const std::string folder = trimSlashes(url);
    const RemoteUrl u = parseUrl(folder);
    std::lock_guard<std::mutex> lock(g_cacheMutex);
    const Listing& l = *listingFor(u, folderPrefix(u.key), "", displayLocation(folder));
    std::vector<std::string> names;
    names.reserve(l.entries.size());
    for (const auto& [name, info] : l.entries)
        if (!name.empty()) names.push_back(name);
    // a folder listed is known as one: what is then asked of its entries is answered from this listing (watch asked
    // the store once per entry of a run folder, at every look: N^2 requests; found by a hunt)
    if (!names.empty()) g_objects.try_emplace(folder).first->second.kind = LocationKind::Folder;
    return names;
}

bool remoteCanList(const std::string& url)
{
    return parseUrl(url).scheme != RemoteUrl::Http;
}

std::vector<std::string> remoteLeftBehind()
{
    std::lock_guard<std::mutex> lock(g_leftBehindMutex);
    return g_leftBehind;
}

RemoteTransferStats remoteTransferStats()
{
    RemoteTransferStats s;
    s.requests = g_requests.load();
    s.bytesFetched = g_bytes.load();
    s.retries = g_retries.load();
    s.inFlight = g_inFlight.load();
    s.held = uint64_t(std::max<int64_t>(0, g_held.load()));
    s.peakHeld = uint64_t(std::max<int64_t>(0, g_peakHeld.load()));
    s.readFailures = g_readFailures.load();
    if (s.readFailures) {
        std::lock_guard<std::mutex> lock(g_readFailureMutex);
        s.firstReadFailure = g_firstReadFailure;
    }
    {
        std::lock_guard<std::mutex> lock(g_unpinnedMutex);
        s.unpinnedObjects = g_unpinned.size();
        if (!g_unpinned.empty()) s.firstUnpinned = *g_unpinned.begin();
    }
    return s;
}

std::string unpinnedObjectsNote(const RemoteTransferStats& stats)
{
    if (!stats.unpinnedObjects) return {};
    const bool one = stats.unpinnedObjects == 1;
    return std::to_string(stats.unpinnedObjects) + (one ? " object was" : " objects were")
        + " read without a version to hold the reads to (the server sent no ETag, and no Last-Modified older than its "
          "answer"
        + (one ? " for " : "; the first: ") + displayText(stats.firstUnpinned) + "): a change while "
        + (one ? "it was" : "they were") + " read would have gone unseen";
}

std::string tagRequestParts(const std::string& userinfo, const std::string& query)
{
    std::lock_guard<std::mutex> lock(g_queriesMutex);
    const RequestParts parts {userinfo, query};
    auto it = std::find(g_requestParts.begin(), g_requestParts.end(), parts);
    if (it == g_requestParts.end()) it = g_requestParts.insert(it, parts);
    return "q=" + std::to_string(it - g_requestParts.begin());
}

void abandonRemoteRequests()
{
    g_abandoned.store(true);
}

void forgetRemoteListings()
{
    std::lock_guard<std::mutex> lock(g_cacheMutex);
    g_objects.clear();
    g_listings.clear();
}

ListingPage parseListingPage(const std::string& body, const std::string& prefix, const std::string& shown)
{
    const XmlAnswer doc(body, "list.xml", XML_PARSE_HUGE);
    if (!doc) throw Error(ErrorKind::Io, shown, "cannot list: the server's listing is not XML");
    ListingPage page;
    doc.eachTopElement([&](xmlNodePtr n) {
        const bool object = XmlAnswer::is(n, "Contents");
        if (object || XmlAnswer::is(n, "CommonPrefixes")) {
            const std::string key = XmlAnswer::child(n, object ? "Key" : "Prefix");
            if (key.size() < prefix.size() || key.compare(0, prefix.size(), prefix) != 0) return;
            ListingPage::Item item;
            item.listedAs = item.name = key.substr(prefix.size());
            item.folder = !object;
            if (object) {
                item.size = std::strtoull(XmlAnswer::child(n, "Size").c_str(), nullptr, 10);
                item.etag = quotedEtag(XmlAnswer::child(n, "ETag"));
            } else if (!item.name.empty() && item.name.back() == '/') {
                item.name.pop_back();
            }
            page.items.push_back(std::move(item));
        } else if (XmlAnswer::is(n, "IsTruncated")) {
            page.truncated = XmlAnswer::text(n) == "true";
        } else if (XmlAnswer::is(n, "NextContinuationToken")) {
            page.continuation = XmlAnswer::text(n);
        }
    });
    return page;
}

UploadsPage parseUploadsPage(const std::string& body, const std::string& prefix, const std::string& shown)
{
    const XmlAnswer doc(body, "uploads.xml", XML_PARSE_HUGE);
    if (!doc) throw Error(ErrorKind::Io, shown, "cannot list uploads: the server's answer is not XML");
    UploadsPage page;
    doc.eachTopElement([&](xmlNodePtr n) {
        if (XmlAnswer::is(n, "Upload")) {
            UploadsPage::Upload upload {XmlAnswer::child(n, "Key"), XmlAnswer::child(n, "UploadId")};
            if (upload.id.empty() || upload.key.size() < prefix.size()
                || upload.key.compare(0, prefix.size(), prefix) != 0)
                return;
            page.uploads.push_back(std::move(upload));
        } else if (XmlAnswer::is(n, "IsTruncated")) {
            page.truncated = XmlAnswer::text(n) == "true";
        } else if (XmlAnswer::is(n, "NextKeyMarker")) {
            page.nextKeyMarker = XmlAnswer::text(n);
        } else if (XmlAnswer::is(n, "NextUploadIdMarker")) {
            page.nextUploadIdMarker = XmlAnswer::text(n);
        }
    });
    return page;
}

std::string s3ErrorCode(const std::string& body)
{
    return xmlErrorCode(body);
}

} // namespace optscope
